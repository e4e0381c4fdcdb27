"""A repository synced while the datastore cannot store its source (docs/architecture.md §8): `helm install` starts
the controllers and the datastore together and `kubectl apply` follows at once, or the datastore rolls out. Before,
the sync raised out of its reconcile: only the controllers' log said why, the repository's status kept what it
said before, and the next try came at the work queue's back-off. Now `Synced=False, DatastoreUnavailable` says it,
no layer is told of a revision its runner could not read, and the sync is tried again within seconds; once the
datastore answers, the source is stored and the layers are told.

The repository controller's own reconcile, against the emulator, a real git repository and a real datastore
client: first on a port nothing listens on, then with the in-process datastore started on that very port.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.controllers.context import Context
from burrito_py.controllers.repository.reconcile import reconcile_repository
from burrito_py.datastore.client import DatastoreClient
from burrito_py.datastore.in_process import free_port, running_datastore
from burrito_py.kube.client import Kube
from burrito_py.kube.inventory import Key
from tests.support.git_repos import commit_tree_bomb, make_repo
from tests.support.runner_overrides import settings

NS = "default"


class Wakes:
    """The repositories' work queue as the reconcile sees it: which key it asked to be handled again, and when."""

    def __init__(self) -> None:
        self.asked: list[tuple[Key, float]] = []

    def schedule(self, key: Key, delay: float = 0.0) -> None:
        self.asked.append((key, delay))


async def sync_once(kubeconfig: Path, cache: Path, url: str, wakes: Wakes) -> None:
    """One reconcile of the repository `repo`, its inventory holding the repository and its layer as stored."""
    kube = await Kube.connect(str(kubeconfig))
    store = DatastoreClient(url, timeout=2.0)
    try:
        ctx = Context(settings=settings(git_cache_dir=cache, allow_file_repositories=True), kube=kube,
                      datastore=store)
        base = f"/apis/{ann.API_VERSION}/namespaces/{NS}"
        for plural, held in (("terraformrepositories", ctx.inventory.repositories),
                             ("terraformlayers", ctx.inventory.layers)):
            for body in (await kube.get(f"{base}/{plural}") or {}).get("items") or ():
                held.observe({"apiVersion": ann.API_VERSION, **body})
        ctx.repositories = wakes  # type: ignore[assignment]
        ctx.primed = True
        await reconcile_repository(ctx, (NS, "repo"))
    finally:
        store.close()
        await kube.close()


def synced(repository: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in repository["status"]["conditions"] if c["type"] == "Synced")


def test_a_sync_while_the_datastore_cannot_store_its_source_says_so_and_is_tried_again_within_seconds(
        api: tuple[ApiServer, Path], tmp_path: Path) -> None:
    server, kubeconfig = api
    repo = make_repo(tmp_path / "upstream")
    head = repo.commit({"app/main.tf": 'output "x" { value = 1 }\n'}, "first")
    base = f"/apis/{ann.API_VERSION}/namespaces/{NS}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    wakes = Wakes()
    with admin_client(server.url) as admin:
        admin.post(f"{base}/terraformrepositories", json={
            "apiVersion": ann.API_VERSION, "kind": "TerraformRepository", "metadata": {"name": "repo"},
            "spec": {"repository": {"url": repo.url}}}).raise_for_status()
        admin.post(f"{base}/terraformlayers", json={
            "apiVersion": ann.API_VERSION, "kind": "TerraformLayer", "metadata": {"name": "app"},
            "spec": {"repository": {"name": "repo"}, "branch": "main", "path": "app"}}).raise_for_status()

        asyncio.run(sync_once(kubeconfig, tmp_path / "cache", url, wakes))
        waiting = admin.get(f"{base}/terraformrepositories/repo").json()
        cond = synced(waiting)
        assert (cond["status"], cond["reason"]) == ("False", "DatastoreUnavailable"), cond
        assert cond["message"].startswith("the source archive cannot be stored: "), cond
        assert "datastore unavailable" in cond["message"] and cond["message"].endswith("; tried again"), cond
        assert waiting["status"]["branches"][0]["lastSyncStatus"].startswith("not synced: "), waiting["status"]
        layer = admin.get(f"{base}/terraformlayers/app").json()
        assert ann.BRANCH_COMMIT not in (layer["metadata"].get("annotations") or {}), "told of an unreadable revision"
        # Tried again within seconds (the earliest wake wins over the poll interval's), not at the next poll.
        assert wakes.asked[0] == ((NS, "repo"), 2.0), wakes.asked
        events = admin.get(f"/api/v1/namespaces/{NS}/events").json()["items"]
        assert [e["reason"] for e in events if e["involvedObject"]["name"] == "repo"] == ["DatastoreUnavailable"]

        # Still down on the next try: the same condition since the first (no second Event), the wake no sooner.
        asyncio.run(sync_once(kubeconfig, tmp_path / "cache", url, wakes))
        assert synced(admin.get(f"{base}/terraformrepositories/repo").json()) == cond
        events = admin.get(f"/api/v1/namespaces/{NS}/events").json()["items"]
        assert [e["reason"] for e in events if e["involvedObject"]["name"] == "repo"] == ["DatastoreUnavailable"]
        assert 2.0 <= wakes.asked[-2][1] <= settings().repository_poll_interval.total_seconds(), wakes.asked

        with running_datastore(tmp_path / "datastore", port=port):
            asyncio.run(sync_once(kubeconfig, tmp_path / "cache", url, wakes))
            with DatastoreClient(url) as store:
                assert store.has_source(NS, "repo", head)
        repository = admin.get(f"{base}/terraformrepositories/repo").json()
        layer = admin.get(f"{base}/terraformlayers/app").json()
    assert (synced(repository)["status"], synced(repository)["reason"]) == ("True", "FetchSucceeded"), repository
    assert repository["status"]["branches"][0]["latestRev"] == head
    assert layer["metadata"]["annotations"][ann.BRANCH_COMMIT] == head


def test_a_branch_whose_source_the_datastore_refuses_leaves_the_other_branches_synced(
        api: tuple[ApiServer, Path], tmp_path: Path) -> None:
    """One branch's archive refused (413: larger than the datastore accepts) is that branch's failure: the sync
    marked every branch "not synced", and every layer of the repository, in every namespace it is shared with,
    became SyncFailed for good. Now the other branches sync and their layers are told; the refused one says why."""
    server, kubeconfig = api
    repo = make_repo(tmp_path / "upstream")
    main = repo.commit({"app/main.tf": 'output "x" { value = 1 }\n'}, "first")
    repo.branch("big")
    big = repo.commit({"app/blob.txt": os.urandom(64 * 1024).hex()}, "too large to store")
    repo.checkout("main")
    base = f"/apis/{ann.API_VERSION}/namespaces/{NS}"
    port = free_port()
    wakes = Wakes()
    with admin_client(server.url) as admin:
        admin.post(f"{base}/terraformrepositories", json={
            "apiVersion": ann.API_VERSION, "kind": "TerraformRepository", "metadata": {"name": "repo"},
            "spec": {"repository": {"url": repo.url}}}).raise_for_status()
        for name, branch in (("app", "main"), ("big", "big")):
            admin.post(f"{base}/terraformlayers", json={
                "apiVersion": ann.API_VERSION, "kind": "TerraformLayer", "metadata": {"name": name},
                "spec": {"repository": {"name": "repo"}, "branch": branch, "path": "app"}}).raise_for_status()
        with running_datastore(tmp_path / "datastore", port=port, max_body_bytes=32 * 1024):
            asyncio.run(sync_once(kubeconfig, tmp_path / "cache", f"http://127.0.0.1:{port}", wakes))
            with DatastoreClient(f"http://127.0.0.1:{port}") as store:
                assert store.has_source(NS, "repo", main) and not store.has_source(NS, "repo", big)
        repository = admin.get(f"{base}/terraformrepositories/repo").json()
        layers = {name: admin.get(f"{base}/terraformlayers/{name}").json() for name in ("app", "big")}
    cond = synced(repository)
    assert (cond["status"], cond["reason"]) == ("False", "SourceNotStored"), cond
    entries = {b["name"]: b for b in repository["status"]["branches"]}
    assert entries["main"]["lastSyncStatus"] == "Synced" and entries["main"]["latestRev"] == main, entries
    assert entries["big"]["lastSyncStatus"].startswith("not synced: the source archive cannot be stored: "), entries
    assert layers["app"]["metadata"]["annotations"][ann.BRANCH_COMMIT] == main
    assert ann.BRANCH_COMMIT not in (layers["big"]["metadata"].get("annotations") or {})


def test_attack_a_tree_bomb_branch_fails_its_sync_in_seconds_and_leaves_nothing_behind(
        api: tuple[ApiServer, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A branch whose tree is a bomb (a few KB of objects naming a million files; a real one names billions) held
    a thread and the repository's turn while `git archive` loaded it into memory, for hours, then filled /tmp; the
    datastore's limit was checked only once the archive existed. Now its files are counted first: the branch
    fails in seconds as an archive the datastore refuses does, and the other branch syncs."""
    server, kubeconfig = api
    repo = make_repo(tmp_path / "upstream")
    main = repo.commit({"app/main.tf": 'output "x" { value = 1 }\n'}, "first")
    bomb = commit_tree_bomb(repo, "bomb", levels=5, width=16)  # 16**5 = 1,048,576 files
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the controllers write archives
    base = f"/apis/{ann.API_VERSION}/namespaces/{NS}"
    port = free_port()
    with admin_client(server.url) as admin:
        admin.post(f"{base}/terraformrepositories", json={
            "apiVersion": ann.API_VERSION, "kind": "TerraformRepository", "metadata": {"name": "repo"},
            "spec": {"repository": {"url": repo.url}}}).raise_for_status()
        for name, branch in (("app", "main"), ("bomb", "bomb")):
            admin.post(f"{base}/terraformlayers", json={
                "apiVersion": ann.API_VERSION, "kind": "TerraformLayer", "metadata": {"name": name},
                "spec": {"repository": {"name": "repo"}, "branch": branch, "path": "app"}}).raise_for_status()
        with running_datastore(tmp_path / "datastore", port=port):
            started = time.monotonic()
            asyncio.run(sync_once(kubeconfig, tmp_path / "cache", f"http://127.0.0.1:{port}", Wakes()))
            elapsed = time.monotonic() - started
            with DatastoreClient(f"http://127.0.0.1:{port}") as store:
                assert store.has_source(NS, "repo", main) and not store.has_source(NS, "repo", bomb)
        repository = admin.get(f"{base}/terraformrepositories/repo").json()
        events = admin.get(f"/api/v1/namespaces/{NS}/events").json()["items"]
        layers = {name: admin.get(f"{base}/terraformlayers/{name}").json() for name in ("app", "bomb")}
    assert elapsed < 20, f"the sync took {elapsed:.1f}s"
    message = (f"the source archive cannot be stored: the tree of {bomb} holds more than 1000000 files, the most a "
               "source archive may hold; tried again")
    cond = synced(repository)
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "SourceNotStored", message), cond
    assert [e["reason"] for e in events if e["involvedObject"]["name"] == "repo"] == ["SourceNotStored"]
    entries = {b["name"]: b for b in repository["status"]["branches"]}
    assert entries["bomb"]["lastSyncStatus"] == f"not synced: {message}", entries
    assert entries["main"]["lastSyncStatus"] == "Synced" and entries["main"]["latestRev"] == main, entries
    assert layers["app"]["metadata"]["annotations"][ann.BRANCH_COMMIT] == main
    assert ann.BRANCH_COMMIT not in (layers["bomb"]["metadata"].get("annotations") or {})
    left = [p.name for p in scratch.iterdir()]  # (other libraries keep their own `tmp*` here)
    assert not [name for name in left if name.startswith("burrito-py-archive-")], left
