"""POST /api/webhook against the emulator: only a verified push marks repositories, and only once."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from burrito_py.api import annotations as ann
from burrito_py.api.crdgen import generate_crds
from burrito_py.datastore.testing import free_port
from burrito_py.local.apiserver import ApiServer
from burrito_py.local.apply import Applier
from burrito_py.server.serving import running_server
from burrito_py.server.settings import ServerSettings

SYNC_MAIN = ann.repository_sync_annotation("main")


def push(url: str, ref: str = "refs/heads/main") -> bytes:
    return json.dumps({"ref": ref, "repository": {"clone_url": url, "html_url": url}}).encode()


def github(body: bytes, secret: str, delivery: str, event: str = "push") -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": f"sha256={digest}",
            "Content-Type": "application/json"}


@pytest.fixture
def world(apiserver: ApiServer, tmp_path: Path) -> Iterator[tuple[ApiServer, httpx.Client]]:
    from tests.conftest import KUBECONFIG_PATH

    applier = Applier(apiserver.url)
    for crd in generate_crds().values():
        applier.apply(crd)
    for namespace, name, url, secret in (
        ("default", "infra", "https://github.com/Org/Infra.git", "right"),
        ("team-b", "infra", "git@github.com:org/infra.git", "other"),
        ("default", "unsigned", "https://github.com/org/unsigned", None),
    ):
        applier.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        source: dict[str, Any] = {"url": url}
        if secret:
            source["secretName"] = f"{name}-webhook"
            applier.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-webhook",
                           "namespace": namespace},
                           "data": {"webhookSecret": base64.b64encode(secret.encode()).decode()}})
        applier.apply({"apiVersion": ann.API_VERSION, "kind": "TerraformRepository",
                       "metadata": {"name": name, "namespace": namespace},
                       "spec": {"repository": source, **({"pullRequests": {"enabled": True}} if namespace == "default"
                                                         else {})}})
    applier.close()
    settings = ServerSettings(host="127.0.0.1", port=free_port(), kubeconfig=KUBECONFIG_PATH, auth_enabled=False,
                              max_webhook_bytes=4096, datastore_url="http://127.0.0.1:9")
    with running_server(settings) as url, httpx.Client(base_url=url, timeout=10) as http:
        yield apiserver, http


def marks(api: ApiServer) -> dict[str, str | None]:
    return {
        f"{r['metadata']['namespace']}/{r['metadata']['name']}": (r["metadata"].get("annotations") or {}).get(SYNC_MAIN)
        for r in api.list_objects(ann.API_VERSION, "terraformrepositories")
    }


def test_a_signed_push_marks_only_the_repositories_whose_secret_verifies(world: tuple[ApiServer, httpx.Client]):
    api, http = world
    body = push("git@github.com:org/infra.git")  # another spelling of both infra repositories' URL
    answer = http.post("/api/webhook", content=body, headers=github(body, "right", "d-1"))
    assert answer.status_code == 202, answer.text
    assert answer.json() == {"branch": "main", "repositories": ["default/infra"]}
    marked = marks(api)
    assert marked["default/infra"] is not None
    assert marked["team-b/infra"] is None and marked["default/unsigned"] is None

    api.clear_requests()
    again = http.post("/api/webhook", content=body, headers=github(body, "right", "d-1"))
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert not [r for r in api.requests if r.method == "PATCH"]  # a redelivery changes nothing


@pytest.mark.parametrize("secret", ["wrong", None])
def test_a_missing_or_wrong_signature_is_401_and_changes_nothing(world: tuple[ApiServer, httpx.Client],
                                                                 secret: str | None):
    api, http = world
    body = push("https://github.com/org/infra")
    headers = github(body, secret or "x", "d-2")
    if secret is None:
        del headers["X-Hub-Signature-256"]
    api.clear_requests()
    answer = http.post("/api/webhook", content=body, headers=headers)
    assert answer.status_code == 401
    assert not [r for r in api.requests if r.method == "PATCH"]
    assert set(marks(api).values()) == {None}


def test_a_repository_without_webhook_secret_accepts_no_delivery(world: tuple[ApiServer, httpx.Client]):
    api, http = world
    body = push("https://github.com/org/unsigned")
    assert http.post("/api/webhook", content=body, headers=github(body, "", "d-3")).status_code == 401
    assert marks(api)["default/unsigned"] is None


def test_gitlab_and_gitea_pushes(world: tuple[ApiServer, httpx.Client]):
    api, http = world
    body = json.dumps({"ref": "refs/heads/main", "project": {"git_ssh_url": "git@github.com:org/infra.git"}}).encode()
    wrong = http.post("/api/webhook", content=body, headers={"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "x"})
    assert wrong.status_code == 401
    answer = http.post("/api/webhook", content=body, headers={"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "other"})
    assert answer.status_code == 202 and answer.json()["repositories"] == ["team-b/infra"]

    body = push("https://github.com/org/infra.git")
    signature = hmac.new(b"right", body, hashlib.sha256).hexdigest()
    headers = {"X-Gitea-Event": "push", "X-GitHub-Event": "push", "X-Gitea-Delivery": "g-1",
               "X-Gitea-Signature": signature}
    answer = http.post("/api/webhook", content=body, headers=headers)
    assert answer.status_code == 202 and answer.json()["repositories"] == ["default/infra"]
    assert all(marks(api)[name] for name in ("default/infra", "team-b/infra"))


def test_ignored_and_refused_deliveries(world: tuple[ApiServer, httpx.Client]):
    api, http = world
    body = push("https://github.com/org/infra")
    issues = http.post("/api/webhook", content=body, headers=github(body, "right", "d-4", event="issues"))
    assert issues.status_code == 202 and "changes no plan" in issues.json()["ignored"]
    tag = push("https://github.com/org/infra", ref="refs/tags/v1")
    tagged = http.post("/api/webhook", content=tag, headers=github(tag, "right", "d-5"))
    assert "not a branch" in tagged.json()["ignored"]
    elsewhere = push("https://github.com/org/unknown")
    answer = http.post("/api/webhook", content=elsewhere, headers=github(elsewhere, "right", "d-6"))
    assert answer.status_code == 202 and "no TerraformRepository" in answer.json()["ignored"]
    malformed = http.post("/api/webhook", content=b"{oops", headers={"X-GitHub-Event": "push"})
    assert malformed.status_code == 400 and "not valid JSON" in malformed.json()["error"]
    assert http.post("/api/webhook", content=body).status_code == 400  # no provider header
    huge = b"{" + b" " * 5000 + b"}"
    assert http.post("/api/webhook", content=huge, headers=github(huge, "right", "d-7")).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while streaming too
        for _ in range(10):
            yield b" " * 1000

    assert http.post("/api/webhook", content=chunks(), headers={"X-GitHub-Event": "push"}).status_code == 413
    assert set(marks(api).values()) == {None}


def pull_request(action: str, number: int, sha: str, merged: bool = False) -> bytes:
    return json.dumps({"action": action, "number": number,
                       "pull_request": {"number": number, "title": "t", "html_url": "https://x/pr", "merged": merged,
                                        "base": {"ref": "main"}, "head": {"ref": "feature", "sha": sha}},
                       "repository": {"clone_url": "https://github.com/org/infra.git", "full_name": "org/infra"}}
                      ).encode()


def test_pull_request_deliveries_write_the_pull_request_of_repositories_that_plan_them(
    world: tuple[ApiServer, httpx.Client],
) -> None:
    """Opened: created (only where spec.pullRequests.enabled); synchronize: a new head; closed: the state; a close
    of one never seen creates nothing; a redelivery is a duplicate; a payload missing a field is a 400 naming it."""
    api, http = world

    def prs() -> dict[str, dict[str, Any]]:
        return {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["spec"]
                for o in api.list_objects(ann.API_VERSION, "terraformpullrequests")}

    for secret in ("right", "other"):  # both infra repositories verify one of the two deliveries
        body = pull_request("opened", 3, "a" * 40)
        answer = http.post("/api/webhook", content=body, headers=github(body, secret, f"pr-1-{secret}",
                                                                        event="pull_request"))
        assert answer.status_code == 202, answer.text
    assert list(prs()) == ["default/infra-pr-3"]  # team-b's repository does not plan pull requests
    assert prs()["default/infra-pr-3"] == {"provider": "github", "repository": "infra", "project": "org/infra",
                                           "number": 3, "base": "main", "headBranch": "feature",
                                           "headSha": "a" * 40, "state": "open", "title": "t",
                                           "url": "https://x/pr"}
    body = pull_request("synchronize", 3, "b" * 40)
    assert http.post("/api/webhook", content=body, headers=github(body, "right", "pr-2", event="pull_request")
                     ).status_code == 202
    again = http.post("/api/webhook", content=body, headers=github(body, "right", "pr-2", event="pull_request"))
    assert again.status_code == 200 and again.json()["duplicate"] is True
    body = pull_request("closed", 3, "b" * 40, merged=True)
    http.post("/api/webhook", content=body, headers=github(body, "right", "pr-3", event="pull_request"))
    assert (prs()["default/infra-pr-3"]["headSha"], prs()["default/infra-pr-3"]["state"]) == ("b" * 40, "merged")
    body = pull_request("closed", 4, "c" * 40)
    answer = http.post("/api/webhook", content=body, headers=github(body, "right", "pr-4", event="pull_request"))
    assert answer.status_code == 202 and "default/infra-pr-4" not in prs()
    labeled = pull_request("labeled", 3, "b" * 40)
    answer = http.post("/api/webhook", content=labeled, headers=github(labeled, "right", "pr-5", event="pull_request"))
    assert answer.status_code == 202 and "changes no plan" in answer.json()["ignored"]
    broken = json.loads(pull_request("opened", 5, "d" * 40))
    del broken["pull_request"]["head"]["sha"]
    raw = json.dumps(broken).encode()
    answer = http.post("/api/webhook", content=raw, headers=github(raw, "right", "pr-6", event="pull_request"))
    assert answer.status_code == 400 and "pull_request.head.sha" in answer.json()["error"]
