"""Issue 4: a signed push plans the layer it touches and no other; a bad signature does nothing.

Real git over smart HTTP (with credentials), real terraform, the controllers polling only hourly — so every
plan after the first is the webhook's doing."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from burrito_py.api import annotations as ann
from burrito_py.controllers.repository.decide import sync_requested
from burrito_py.datastore.in_process import free_port
from burrito_py.server.serving import running_server
from burrito_py.server.settings import ServerSettings
from burrito_py.server.webhook_keys import decode_entries, hmac_key
from burrito_py.timeutil import format_time_precise, utcnow
from tests.support.git_repos import TestRepo, make_bare
from tests.support.git_servers import running_http_git_server
from tests.support.real_cluster import RealCluster

from .conftest import Platform, layer_code, running_platform, wait_for
from .test_git_credentials import LOOPBACK_HOSTS, put_secret

PASSWORD = "webhook-e2e-Pa55"
HOOK_SECRET = "hook-secret-e2e"


@pytest.fixture
def world(tmp_path: Path, repo: TestRepo, real_cluster: RealCluster
          ) -> Iterator[tuple[Platform, httpx.Client, str, Path]]:
    bare = tmp_path / "http" / "infra.git"
    repo.push(make_bare(bare))
    with (running_http_git_server(tmp_path / "http", "alice", PASSWORD) as git_server,
          running_platform(tmp_path / "p", tmp_path / "kubeconfig", repository_poll_interval=timedelta(hours=1),
                           cluster=real_cluster) as platform):
        settings = ServerSettings(host="127.0.0.1", port=free_port(), kubeconfig=platform.kubeconfig,
                                  auth_enabled=False, datastore_url=platform.datastore_url,
                                  webhook_keys_namespace=platform.namespace)
        with running_server(settings) as server_url, httpx.Client(base_url=server_url, timeout=30) as http:
            url = git_server.url_for("infra.git")
            put_secret(platform, "infra-git", {**LOOPBACK_HOSTS, "username": "alice", "password": PASSWORD,
                                               "webhookSecret": HOOK_SECRET})
            platform.create_repository("infra", url, repository={"url": url, "secretName": "infra-git"})
            platform.create_layer("app", "infra", "layers/app")
            platform.create_layer("other", "infra", "layers/other")
            platform.wait_state("app", "ApplyNeeded", timeout=90)
            platform.wait_state("other", "ApplyNeeded", timeout=90)
            yield platform, http, url, bare


def github_push(url: str, secret: str, delivery: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"ref": "refs/heads/main", "repository": {"clone_url": url.upper().replace("HTTP:", "http:")}})
    digest = hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()
    return body.encode(), {"X-GitHub-Event": "push", "X-GitHub-Delivery": delivery,
                           "X-Hub-Signature-256": f"sha256={digest}", "Content-Type": "application/json"}


def plans(platform: Platform, layer: str) -> int:
    return sum(1 for r in platform.runs(layer) if r["spec"]["action"] == "plan")


def test_signed_pushes_plan_the_touched_layer_and_a_bad_signature_does_nothing(
    world: tuple[Platform, httpx.Client, str, Path], repo: TestRepo
):
    platform, http, url, bare = world
    before = {layer: plans(platform, layer) for layer in ("app", "other")}

    # A bad signature: the push is refused, nothing is marked, nothing plans.
    first = repo.commit({"layers/app/main.tf": layer_code("v2")}, "change app")
    repo.push(bare.as_uri())
    body, headers = github_push(url, "not-the-secret", "bad-1")
    refused = http.post("/api/webhook", content=body, headers=headers)
    assert refused.status_code == 401, refused.text
    time.sleep(3)
    repository = platform.custom.get_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                              "terraformrepositories", "infra")
    assert ann.repository_sync_annotation("main") not in (repository["metadata"].get("annotations") or {})
    assert {layer: plans(platform, layer) for layer in ("app", "other")} == before

    # GitHub, signed: app plans at the new commit, other does not plan.
    body, headers = github_push(url, HOOK_SECRET, "good-1")
    assert http.post("/api/webhook", content=body, headers=headers).status_code == 202
    wait_for(lambda: platform.annotations("app").get(ann.PLAN_COMMIT) == first, 60, what="app planned at the push")
    assert plans(platform, "app") == before["app"] + 1
    assert platform.annotations("other").get(ann.BRANCH_COMMIT) == first
    assert plans(platform, "other") == before["other"]

    # GitLab: a commit under other's path plans other only.
    second = repo.commit({"layers/other/main.tf": layer_code("other-v2")}, "change other")
    repo.push(bare.as_uri())
    gitlab = json.dumps({"ref": "refs/heads/main", "project": {"git_http_url": url.removesuffix(".git")}}).encode()
    wrong = http.post("/api/webhook", content=gitlab, headers={"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "x"})
    assert wrong.status_code == 401
    answer = http.post("/api/webhook", content=gitlab,
                       headers={"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": HOOK_SECRET})
    assert answer.status_code == 202
    wait_for(lambda: platform.annotations("other").get(ann.PLAN_COMMIT) == second, 60, what="other planned")
    assert plans(platform, "other") == before["other"] + 1
    assert plans(platform, "app") == before["app"] + 1


def test_a_redelivery_to_another_server_replica_plans_once(
    world: tuple[Platform, httpx.Client, str, Path], repo: TestRepo
):
    """Issue 12 item 3: each server replica remembers the deliveries it saw (per process), so a redelivery that
    lands on the other replica is acted on again. That is harmless: it marks the repository again, the
    repository controller fetches the same head, and the layer, decided on revisions, plans that commit once."""
    platform, first_replica, url, bare = world
    settings = ServerSettings(host="127.0.0.1", port=free_port(), kubeconfig=platform.kubeconfig,
                              auth_enabled=False, datastore_url=platform.datastore_url,
                              webhook_keys_namespace=platform.namespace)
    with running_server(settings) as second_url, httpx.Client(base_url=second_url, timeout=30) as second_replica:
        before = plans(platform, "app")
        commit = repo.commit({"layers/app/main.tf": layer_code("v3")}, "change app again")
        repo.push(bare.as_uri())
        body, headers = github_push(url, HOOK_SECRET, "redelivered-1")
        assert first_replica.post("/api/webhook", content=body, headers=headers).status_code == 202
        assert first_replica.post("/api/webhook", content=body, headers=headers).json()["duplicate"] is True
        assert second_replica.post("/api/webhook", content=body, headers=headers).status_code == 202
        wait_for(lambda: platform.annotations("app").get(ann.PLAN_COMMIT) == commit, 60, what="app planned")
        # Both replicas' marks are handled before we count: the branch was synced after the last of them.
        wait_for(lambda: not sync_requested(platform.custom.get_namespaced_custom_object(
            ann.GROUP, ann.VERSION, platform.namespace, "terraformrepositories", "infra")), 60,
                     what="the sync requests handled")
        time.sleep(3)
        assert plans(platform, "app") == before + 1
        at_commit = [r for r in platform.runs("app")
                     if r["spec"]["action"] == "plan" and r["spec"]["layer"].get("revision") == commit]
        assert len(at_commit) == 1


def test_the_controllers_publish_each_repositorys_key_follow_its_secret_and_withdraw_it(
    world: tuple[Platform, httpx.Client, str, Path],
) -> None:
    """The server reads no repository Secret (issue 24 finding 9): the repository controller publishes each key into
    `burrito-py-webhook-keys`, reports it in the `Webhooks` condition, publishes a rotated secret at its next
    reconcile (a sync request hastens it), says why a repository has none, and withdraws a deleted repository's."""
    platform, http, url, _ = world

    def webhooks(name: str) -> dict[str, Any] | None:
        repository = platform.custom.get_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                                  "terraformrepositories", name)
        return next((c for c in (repository.get("status") or {}).get("conditions") or ()
                     if c["type"] == "Webhooks"), None)

    def published() -> dict[tuple[str, str], Any]:
        secret = platform.core.read_namespaced_secret("burrito-py-webhook-keys", platform.namespace)
        return decode_entries({"data": secret.data})

    assert (webhooks("infra") or {}).get("status") == "True"
    assert published()[(platform.namespace, "infra")].key == hmac_key(HOOK_SECRET.encode())

    # Rotation: the new secret verifies once the repository is reconciled again, the old one no more.
    put_secret(platform, "infra-git", {"username": "alice", "password": PASSWORD, "webhookSecret": "rotated"})
    platform.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                   "terraformrepositories", "infra",
                                                   {"metadata": {"annotations": {
                                                       ann.repository_sync_annotation("main"): format_time_precise(
                                                           utcnow())}}})
    wait_for(lambda: published()[(platform.namespace, "infra")].key == b"rotated", 30, what="the rotated key published")

    def answer(secret: str, delivery: str) -> int:
        body, headers = github_push(url, secret, delivery)
        return int(http.post("/api/webhook", content=body, headers=headers).status_code)

    wait_for(lambda: answer("rotated", f"rotated-{time.monotonic()}") == 202, 10, what="the rotated key verifies")
    assert answer(HOOK_SECRET, "old-secret") == 401

    # A repository whose Secret has no webhookSecret: no key, and the condition says why.
    put_secret(platform, "plain-git", {"username": "alice", "password": PASSWORD})
    platform.create_repository("plain", url + "?plain", repository={"url": url, "secretName": "plain-git"})
    condition = wait_for(lambda: webhooks("plain"), 30, what="the plain repository's Webhooks condition")
    assert (condition["status"], condition["reason"]) == ("False", "NoWebhookSecret")
    assert "webhookSecret" in condition["message"] and "plain-git" in condition["message"]
    assert (platform.namespace, "plain") not in published()

    # Deleted: its key goes.
    platform.custom.delete_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                    "terraformrepositories", "infra")
    wait_for(lambda: (platform.namespace, "infra") not in published(), 30,
             what="the deleted repository's key withdrawn")
    wait_for(lambda: answer("rotated", f"deleted-{time.monotonic()}") == 401, 10, what="no key, no delivery")
