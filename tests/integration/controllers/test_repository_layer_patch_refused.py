"""One layer's annotation patch refused by the API (a 422: its annotations at the size limit) is that layer's
failure: the repository controller's own reconcile, against the emulator (which enforces kube-apiserver's 256 KiB of
annotations) and a real git repository."""

from __future__ import annotations

import asyncio
from pathlib import Path

from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from tests.support.git_repos import make_repo

from .conftest import sync_repository_once

NS = "default"
FILLER = "example.com/filler"


def test_a_layer_whose_annotations_cannot_grow_is_told_and_the_others_sync(api: tuple[ApiServer, Path],
                                                                          tmp_path: Path) -> None:
    """The 422 left the reconcile: the layers after it were never told of the head and the repository's status was
    never written, at every poll, for as long as that one layer stayed so."""
    server, kubeconfig = api
    repo = make_repo(tmp_path / "upstream")
    head = repo.commit({"app/main.tf": 'output "x" { value = 1 }\n'}, "first")
    base = f"/apis/{ann.API_VERSION}/namespaces/{NS}"
    with admin_client(server.url) as admin:
        admin.post(f"{base}/terraformrepositories", json={
            "apiVersion": ann.API_VERSION, "kind": "TerraformRepository", "metadata": {"name": "repo"},
            "spec": {"repository": {"url": repo.url}}}).raise_for_status()
        full = {FILLER: "x" * (256 * 1024 - len(FILLER) - 16)}  # 16 bytes short of the API's limit
        for name, annotations in (("a-full", full), ("b-app", {})):
            admin.post(f"{base}/terraformlayers", json={
                "apiVersion": ann.API_VERSION, "kind": "TerraformLayer",
                "metadata": {"name": name, "annotations": annotations},
                "spec": {"repository": {"name": "repo"}, "branch": "main", "path": "app"}}).raise_for_status()
        for _ in range(2):  # the next poll tells nothing twice
            asyncio.run(sync_repository_once(kubeconfig, NS, "repo", git_cache_dir=tmp_path / "cache",
                                             allow_file_repositories=True))
        repository = admin.get(f"{base}/terraformrepositories/repo").json()
        layers = {name: admin.get(f"{base}/terraformlayers/{name}").json() for name in ("a-full", "b-app")}
        events = admin.get(f"/api/v1/namespaces/{NS}/events").json()["items"]
    assert layers["b-app"]["metadata"]["annotations"][ann.BRANCH_COMMIT] == head
    assert ann.BRANCH_COMMIT not in layers["a-full"]["metadata"]["annotations"]
    [entry] = repository["status"]["branches"]
    assert (entry["lastSyncStatus"], entry["latestRev"]) == ("Synced", head), entry
    told = [e for e in events if e["involvedObject"]["name"] == "a-full"]
    assert [(e["type"], e["reason"]) for e in told] == [("Warning", "CommitNotRecorded")], told
    assert told[0]["message"].startswith(f"the repository controller cannot record the head {head} of branch main "
                                         "on this layer: 422 Invalid: "), told[0]["message"]
