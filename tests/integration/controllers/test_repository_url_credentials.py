"""A repository URL holding credentials (`https://user:password@host/…`, which git accepts) never reaches a status:
the repository controller's own reconcile, against the emulator and a real `git http-backend` behind basic auth."""

from __future__ import annotations

import asyncio
from pathlib import Path

from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.validation import validate_layer
from tests.support.git_repos import make_bare, make_repo
from tests.support.git_servers import running_http_git_server
from tests.support.runner_overrides import settings

from .conftest import sync_repository_once

NS = "default"
PASSWORD = "pw-in-the-url-4711"


def test_attack_a_missing_branch_never_shows_the_password_in_the_repository_url(
        api: tuple[ApiServer, Path], tmp_path: Path) -> None:
    """`branch "x" does not exist in <url>` wrote the URL as the spec holds it, password included, in the
    repository's status, and from there in the `BranchNotFound` condition of every layer using it (those of the
    namespaces it is shared with too)."""
    server, kubeconfig = api
    make_repo(tmp_path / "work").push(make_bare(tmp_path / "srv" / "infra.git"))
    base = f"/apis/{ann.API_VERSION}/namespaces/{NS}"
    with running_http_git_server(tmp_path / "srv", "alice", PASSWORD) as git_server, admin_client(server.url) as admin:
        url = git_server.url_for("infra.git").replace("http://", f"http://alice:{PASSWORD}@")
        admin.post(f"{base}/terraformrepositories", json={
            "apiVersion": ann.API_VERSION, "kind": "TerraformRepository", "metadata": {"name": "repo"},
            "spec": {"repository": {"url": url}}}).raise_for_status()
        admin.post(f"{base}/terraformlayers", json={
            "apiVersion": ann.API_VERSION, "kind": "TerraformLayer", "metadata": {"name": "app"},
            "spec": {"repository": {"name": "repo"}, "branch": "nope", "path": "app"}}).raise_for_status()
        asyncio.run(sync_repository_once(kubeconfig, NS, "repo", git_cache_dir=tmp_path / "cache",
                                         outbound_allowed_networks=["127.0.0.0/8"]))
        repository = admin.get(f"{base}/terraformrepositories/repo").json()
        layer = admin.get(f"{base}/terraformlayers/app").json()
    [entry] = repository["status"]["branches"]
    safe = git_server.url_for("infra.git").replace("http://", "http://***@")
    assert entry["lastSyncStatus"] == f'branch "nope" does not exist in {safe}', entry
    ready = validate_layer(layer, repository, settings()).ready
    assert (ready.reason, ready.message) == ("BranchNotFound", f'spec.branch: branch "nope" does not exist in {safe}')
    assert PASSWORD not in str(repository["status"]), repository["status"]
