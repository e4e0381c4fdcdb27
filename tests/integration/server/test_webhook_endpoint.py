"""POST /api/webhook against the emulator: only a verified push marks repositories, and only once. The keys are
published as the controllers publish them (`controllers/repository/webhook_keys.py`, the same encoding): the
server reads no repository Secret."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier

from burrito_py.api import annotations as ann
from burrito_py.api.crdgen import generate_crds
from burrito_py.server.serving import running_server
from burrito_py.server.settings import ServerSettings
from burrito_py.server.webhook_keys import encode_entry, entry_name

SYNC_MAIN = ann.repository_sync_annotation("main")


def push(url: str, ref: str = "refs/heads/main") -> bytes:
    return json.dumps({"ref": ref, "repository": {"clone_url": url, "html_url": url}}).encode()


def github(body: bytes, secret: str, delivery: str, event: str = "push") -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": f"sha256={digest}",
            "Content-Type": "application/json"}


KEYS_NAMESPACE, KEYS_SECRET = "burrito-py-system", "burrito-py-webhook-keys"


def server_settings(**overrides: Any) -> ServerSettings:
    from tests.conftest import KUBECONFIG_PATH

    values: dict[str, Any] = {
        "host": "127.0.0.1", "port": 0, "kubeconfig": KUBECONFIG_PATH, "auth_enabled": False,
        "max_webhook_bytes": 4096, "datastore_url": "http://127.0.0.1:9", "webhook_keys_namespace": KEYS_NAMESPACE,
        "webhook_keys_secrets": [KEYS_SECRET], "webhook_failures_per_minute": 0}
    return ServerSettings(**{**values, **overrides})


@pytest.fixture
def world(apiserver: ApiServer, tmp_path: Path) -> Iterator[tuple[ApiServer, httpx.Client]]:
    applier = Applier(apiserver.url)
    for crd in generate_crds().values():
        applier.apply(crd)
    keys: dict[str, str] = {}
    applier.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KEYS_NAMESPACE}})
    for namespace, name, url, secret in (
        ("default", "infra", "https://github.com/Org/Infra.git", "right"),
        ("team-b", "infra", "git@github.com:org/infra.git", "other"),
        ("default", "unsigned", "https://github.com/org/unsigned", None),
        ("default", "bb", "https://bitbucket.org/team/infra.git", "bb-secret"),
        ("default", "bbdc", "ssh://git@bitbucket.example:7999/team/infra.git", "bbdc-secret"),
        ("default", "ado", "https://dev.azure.com/contoso/Platform/_git/infra", "ado-secret"),
    ):
        applier.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        source: dict[str, Any] = {"url": url}
        if secret:
            source["secretName"] = f"{name}-webhook"
            applier.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-webhook",
                           "namespace": namespace},
                           "data": {"webhookSecret": base64.b64encode(secret.encode()).decode()}})
        repository = applier.apply({"apiVersion": ann.API_VERSION, "kind": "TerraformRepository",
                                    "metadata": {"name": name, "namespace": namespace},
                                    "spec": {"repository": source, **({"pullRequests": {"enabled": True}}
                                                                      if namespace == "default" else {})}})
        if secret:
            keys[entry_name(namespace, name)] = encode_entry(repository["metadata"]["uid"], secret.encode())
    applier.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": KEYS_SECRET, "namespace": KEYS_NAMESPACE},
                   "data": keys})
    applier.close()
    with running_server(server_settings()) as url, httpx.Client(base_url=url, timeout=10) as http:
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


def test_attack_another_repositorys_delivery_under_the_same_id_never_hides_this_ones(
        world: tuple[ApiServer, httpx.Client]):
    """Attack test: a delivery's id is not signed. A tenant holding the secret of their own repository (team-b's,
    whose URL here is also default's) sent a push verified for theirs under the id of another repository's
    delivery (one they saw in the provider's delivery log, waiting for a redelivery): the server had the id as
    seen for every repository, and default's delivery under it was dropped as a duplicate, its push never synced.
    Now an id is seen per repository."""
    api, http = world
    body = push("git@github.com:org/infra.git")
    theirs = http.post("/api/webhook", content=body, headers=github(body, "other", "d-shared"))
    assert theirs.status_code == 202 and theirs.json()["repositories"] == ["team-b/infra"], theirs.text
    assert marks(api)["default/infra"] is None
    ours = push("https://github.com/Org/Infra.git")  # default's own hook, its own body
    answer = http.post("/api/webhook", content=ours, headers=github(ours, "right", "d-shared"))
    assert answer.status_code == 202 and answer.json()["repositories"] == ["default/infra"], answer.text
    assert marks(api)["default/infra"] is not None
    again = http.post("/api/webhook", content=ours, headers=github(ours, "right", "d-shared"))
    assert again.status_code == 200 and again.json()["duplicate"] is True  # its own redelivery is still one


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
    assert answer.status_code == 401 and "no TerraformRepository accepts" in answer.json()["error"]
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


def pull_request(action: str, number: int, sha: str, merged: bool = False, updated: str = "2026-03-01T10:00:00Z"
                 ) -> bytes:
    return json.dumps({"action": action, "number": number,
                       "pull_request": {"number": number, "title": "t", "html_url": "https://x/pr", "merged": merged,
                                        "base": {"ref": "main"}, "head": {"ref": "feature", "sha": sha},
                                        "updated_at": updated},
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
                                           "url": "https://x/pr", "updatedAt": "2026-03-01T10:00:00.000000Z",
                                           # the payload names no head repository: taken as a fork's (§11.3)
                                           "fromFork": True, "author": ""}
    body = pull_request("synchronize", 3, "b" * 40, updated="2026-03-01T10:05:00Z")
    assert http.post("/api/webhook", content=body, headers=github(body, "right", "pr-2", event="pull_request")
                     ).status_code == 202
    again = http.post("/api/webhook", content=body, headers=github(body, "right", "pr-2", event="pull_request"))
    assert again.status_code == 200 and again.json()["duplicate"] is True
    body = pull_request("closed", 3, "b" * 40, merged=True, updated="2026-03-01T10:09:00Z")
    http.post("/api/webhook", content=body, headers=github(body, "right", "pr-3", event="pull_request"))
    assert (prs()["default/infra-pr-3"]["headSha"], prs()["default/infra-pr-3"]["state"]) == ("b" * 40, "merged")
    body = pull_request("closed", 4, "c" * 40)
    answer = http.post("/api/webhook", content=body, headers=github(body, "right", "pr-4", event="pull_request"))
    assert answer.status_code == 202 and "default/infra-pr-4" not in prs()
    # (labels may approve a fork's head, §11.3: an assignment is what changes nothing)
    labeled = pull_request("assigned", 3, "b" * 40)
    answer = http.post("/api/webhook", content=labeled, headers=github(labeled, "right", "pr-5", event="pull_request"))
    assert answer.status_code == 202 and "changes no plan" in answer.json()["ignored"]
    broken = json.loads(pull_request("opened", 5, "d" * 40))
    del broken["pull_request"]["head"]["sha"]
    raw = json.dumps(broken).encode()
    answer = http.post("/api/webhook", content=raw, headers=github(raw, "right", "pr-6", event="pull_request"))
    assert answer.status_code == 400 and "pull_request.head.sha" in answer.json()["error"]


def bitbucket_pull_request(source_uuid: str, head: str = "0123456789ab") -> bytes:
    repository = {"full_name": "team/infra", "uuid": "{r}", "links": {"html": {"href": "https://bitbucket.org/team/infra"}}}
    source_repository = {**repository, "uuid": source_uuid}
    return json.dumps({"actor": {"account_id": "557058:a"}, "repository": repository, "pullrequest": {
        "id": 9, "title": "t", "state": "OPEN", "author": {"account_id": "557058:a"},
        "source": {"branch": {"name": "topic"}, "commit": {"hash": head}, "repository": source_repository},
        "destination": {"branch": {"name": "main"}, "repository": repository},
        "updated_on": "2026-03-01T10:00:00.000000+00:00"}}).encode()


def bitbucket(body: bytes, secret: str | None, delivery: str, event: str = "pullrequest:created") -> dict[str, str]:
    headers = {"X-Event-Key": event, "X-Hook-UUID": "h", "X-Request-UUID": delivery,
               "Content-Type": "application/json"}
    if secret is not None:
        headers["X-Hub-Signature"] = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return headers


def test_bitbucket_cloud_pull_requests_are_verified_and_forks_told(world: tuple[ApiServer, httpx.Client]) -> None:
    """Issue 30 item 6, over HTTP: an unsigned or wrongly signed Bitbucket Cloud delivery is the one 401 and writes
    nothing; a signed one writes the pull request, and a fork is recorded as one."""
    api, http = world

    def prs() -> dict[str, dict[str, Any]]:
        return {o["metadata"]["name"]: o["spec"] for o in api.list_objects(ann.API_VERSION, "terraformpullrequests")}

    body = bitbucket_pull_request("{r}")
    for secret in (None, "right", "bb-secret-"):
        api.clear_requests()
        answer = http.post("/api/webhook", content=body, headers=bitbucket(body, secret, f"bb-{secret}"))
        assert answer.status_code == 401, answer.text
        assert not [r for r in api.requests if r.method in ("POST", "PATCH")] and prs() == {}
    answer = http.post("/api/webhook", content=body, headers=bitbucket(body, "bb-secret", "bb-1"))
    assert answer.status_code == 202, answer.text
    spec = prs()["bb-pr-9"]
    assert (spec["provider"], spec["project"], spec["headSha"], spec["fromFork"]) == (
        "bitbucket", "team/infra", "0123456789ab", False)
    fork = bitbucket_pull_request("{outsider}", "abcdef012345")
    fork = fork.replace(b'"id": 9', b'"id": 10')
    assert http.post("/api/webhook", content=fork, headers=bitbucket(fork, "bb-secret", "bb-2")).status_code == 202
    assert prs()["bb-pr-10"]["fromFork"] is True


def test_bitbucket_datacenter_pull_requests_are_verified_and_forks_told(world: tuple[ApiServer, httpx.Client]) -> None:
    """The same over HTTP for Data Center: its clone URL names the repository; unsigned or wrongly signed is the
    one 401; a signed fork is recorded as one."""
    api, http = world

    def prs() -> dict[str, dict[str, Any]]:
        return {o["metadata"]["name"]: o["spec"] for o in api.list_objects(ann.API_VERSION, "terraformpullrequests")}

    target = {"slug": "infra", "id": 84, "project": {"key": "TEAM"},
              "links": {"clone": [{"href": "https://bitbucket.example/scm/team/infra.git"},
                                  {"href": "ssh://git@bitbucket.example:7999/team/infra.git"}]}}

    def opened(number: int, source_id: int) -> bytes:
        return json.dumps({"eventKey": "pr:opened", "actor": {"name": "bob"}, "pullRequest": {
            "id": number, "title": "t", "state": "OPEN", "updatedDate": 1772360430000,
            "fromRef": {"displayId": "topic", "latestCommit": "e" * 40, "repository": {**target, "id": source_id}},
            "toRef": {"displayId": "main", "repository": target}}}).encode()

    def signed(body: bytes, secret: str | None) -> dict[str, str]:
        headers = {"X-Event-Key": "pr:opened", "X-Request-Id": f"dc-{secret}-{hashlib.sha256(body).hexdigest()}"}
        if secret is not None:
            headers["X-Hub-Signature"] = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        return headers

    body = opened(11, 84)
    for secret in (None, "bb-secret", "right"):
        api.clear_requests()
        assert http.post("/api/webhook", content=body, headers=signed(body, secret)).status_code == 401
        assert not [r for r in api.requests if r.method in ("POST", "PATCH")] and prs() == {}
    answer = http.post("/api/webhook", content=body, headers=signed(body, "bbdc-secret"))
    assert answer.status_code == 202, answer.text
    spec = prs()["bbdc-pr-11"]
    assert (spec["provider"], spec["project"], spec["fromFork"]) == ("bitbucket-datacenter", "TEAM/infra", False)
    fork = opened(12, 99)
    assert http.post("/api/webhook", content=fork, headers=signed(fork, "bbdc-secret")).status_code == 202
    assert prs()["bbdc-pr-12"]["fromFork"] is True


# -- issue 24 finding 11: attacks from outside -------------------------------------------------------------------
def test_an_outsider_probing_repository_urls_gets_one_answer_for_configured_and_unknown_ones(
    world: tuple[ApiServer, httpx.Client],
) -> None:
    """Attack: an outsider posts unsigned (or wrongly signed) pushes naming guessed repository URLs and reads which
    ones are configured from the answer (401 vs 202) or its time (a list and a Secret read for a configured URL,
    an early answer for an unknown one). Now: the same status and body, no API request for either, and the same
    work (a decoy HMAC for an unknown repository; medians compared over a few hundred KB bodies)."""
    api, http = world
    pad = " " * 3000  # within the fixture's 4 KiB limit: HMAC work large enough to show in a time

    probes = {"configured": ("https://github.com/org/infra.git", True),
              "unknown": ("https://github.com/org/not-configured.git", True),
              "unsigned": ("https://github.com/org/infra.git", False),
              "keyless": ("https://github.com/org/unsigned", True)}  # configured, no webhookSecret
    answers: dict[str, set[tuple[int, str]]] = {what: set() for what in probes}
    times: dict[str, list[float]] = {what: [] for what in probes}

    def probe(what: str, i: int) -> None:
        url, signed = probes[what]
        body = json.dumps({"ref": "refs/heads/main", "repository": {"clone_url": url}, "pad": pad}).encode()
        headers = github(body, "guessed", f"probe-{what}-{i}")
        if not signed:
            del headers["X-Hub-Signature-256"]
        started = time.perf_counter()
        answer = http.post("/api/webhook", content=body, headers=headers)
        times[what].append(time.perf_counter() - started)
        answers[what].add((answer.status_code, answer.text))

    probe("configured", -1)  # the server is up and its index listed
    api.clear_requests()
    for i in range(40):  # interleaved, so the machine's load weighs on both alike
        for what in probes:
            probe(what, i)
    assert len(answers["configured"]) == 1 and all(a == answers["configured"] for a in answers.values()), answers
    assert next(iter(answers["configured"]))[0] == 401
    assert not api.requests, [f"{r.method} {r.path}" for r in api.requests]  # nothing asked of the API
    configured, unknown = statistics.median(times["configured"]), statistics.median(times["unknown"])
    assert unknown < 3 * configured and configured < 3 * unknown, (configured, unknown)
    assert set(marks(api).values()) == {None}


def test_a_captured_signed_push_sent_again_under_a_fresh_delivery_id_does_nothing(
    world: tuple[ApiServer, httpx.Client],
) -> None:
    """Attack: the delivery id header is not signed, so a captured signed delivery sent again with a new id passed
    the de-duplication and marked the repository again. Now a delivery is also known by the digest of its signed
    body."""
    api, http = world
    body = push("https://github.com/org/infra.git")
    headers = github(body, "right", "original-1")
    assert http.post("/api/webhook", content=body, headers=headers).status_code == 202
    api.clear_requests()
    for fresh in ("replayed-1", "replayed-2", ""):
        replayed = http.post("/api/webhook", content=body, headers={**headers, "X-GitHub-Delivery": fresh})
        assert replayed.status_code == 200 and replayed.json()["duplicate"] is True, replayed.text
    assert not [r for r in api.requests if r.method in ("PATCH", "PUT", "POST")]


def test_a_replayed_pull_request_event_never_rolls_the_pull_request_back(
    world: tuple[ApiServer, httpx.Client],
) -> None:
    """Attack: replay an old signed `opened` delivery (captured earlier) after the pull request moved to a new head,
    at a replica that never saw it (per-process de-duplication does not help there): it set the old head again.
    Now a TerraformPullRequest records the provider's `updated_at` of the event that wrote it, and an older event
    changes nothing."""
    api, http = world
    opened = pull_request("opened", 7, "a" * 40, updated="2026-03-01T10:00:00Z")
    captured = github(opened, "right", "pr7-opened", event="pull_request")
    assert http.post("/api/webhook", content=opened, headers=captured).status_code == 202
    newer = pull_request("synchronize", 7, "b" * 40, updated="2026-03-01T10:05:00Z")
    assert http.post("/api/webhook", content=newer, headers=github(newer, "right", "pr7-sync", event="pull_request")
                     ).status_code == 202
    with running_server(server_settings()) as other_url, httpx.Client(base_url=other_url, timeout=10) as other:
        answer = other.post("/api/webhook", content=opened, headers={**captured, "X-GitHub-Delivery": "pr7-again"})
    held = api.get_object(ann.API_VERSION, "terraformpullrequests", "default", "infra-pr-7")
    assert held is not None
    assert (held["spec"]["headSha"], held["spec"].get("updatedAt")) == ("b" * 40, "2026-03-01T10:05:00.000000Z")
    assert answer.status_code == 202 and "older" in answer.json()["ignored"], answer.text


def test_a_burst_of_unsigned_deliveries_reads_nothing_from_the_api_and_is_throttled(
    world: tuple[ApiServer, httpx.Client],
) -> None:
    """Attack: a flood of unsigned deliveries naming a configured repository made the server list
    TerraformRepositories cluster-wide (and read Secrets) once per delivery. Now they are matched in memory (no API
    request at all), and past `webhook_failures_burst` refused deliveries a source gets 429 with Retry-After, before
    its body is read, while a verified delivery from another source still goes through."""
    api, _ = world
    settings = server_settings(webhook_failures_per_minute=0.5, webhook_failures_burst=5)
    with running_server(settings) as url, httpx.Client(base_url=url, timeout=10) as http:
        body = push("https://github.com/org/infra.git")
        assert http.post("/api/webhook", content=body, headers={"X-GitHub-Event": "push"}).status_code == 401
        api.clear_requests()  # the index is up (its list and watches started with the first delivery)
        statuses = [http.post("/api/webhook", content=body, headers={"X-GitHub-Event": "push", "X-GitHub-Delivery":
                                                                     f"flood-{i}"}).status_code for i in range(30)]
        assert not [r for r in api.requests if r.method == "GET" and "watch" not in r.query], [
            f"{r.method} {r.path}" for r in api.requests]
        assert not [r for r in api.requests if "secrets" in r.path and "watch" not in r.query]
        assert statuses[:4] == [401] * 4 and set(statuses[4:]) == {429}, statuses
        throttled = http.post("/api/webhook", content=body, headers={"X-GitHub-Event": "push"})
        assert throttled.status_code == 429 and int(throttled.headers["Retry-After"]) >= 1
        # Another source (the provider, seen through a trusted proxy) is not held back by the flood.
    proxied = server_settings(webhook_failures_per_minute=0.5, webhook_failures_burst=1,
                              forwarded_allow_ips=["127.0.0.1"])
    with running_server(proxied) as url, httpx.Client(base_url=url, timeout=10) as http:
        for _ in range(3):
            http.post("/api/webhook", content=body, headers={"X-GitHub-Event": "push", "X-Forwarded-For": "192.0.2.66"})
        assert http.post("/api/webhook", content=body, headers={"X-GitHub-Event": "push",
                                                                 "X-Forwarded-For": "192.0.2.66"}).status_code == 429
        signed = http.post("/api/webhook", content=body, headers={**github(body, "right", "from-the-provider"),
                                                                  "X-Forwarded-For": "140.82.115.1"})
        assert signed.status_code == 202, signed.text


def azure_pull_request(fork: bool = False, number: int = 21) -> bytes:
    repository = {"id": "r-1", "name": "infra", "remoteUrl": "https://contoso@dev.azure.com/contoso/Platform/_git/infra",
                  "webUrl": "https://dev.azure.com/contoso/Platform/_git/infra"}
    resource: dict[str, Any] = {
        "pullRequestId": number, "status": "active", "title": "t", "repository": repository,
        "sourceRefName": "refs/heads/topic", "targetRefName": "refs/heads/main",
        "lastMergeSourceCommit": {"commitId": "0123456789abcdef"}, "createdBy": {"uniqueName": "ann@contoso.com"}}
    if fork:
        resource["forkSource"] = {"name": "refs/heads/topic", "repository": {**repository, "id": "r-2"}}
    return json.dumps({"id": f"evt-{number}", "eventType": "git.pullrequest.created", "publisherId": "tfs",
                       "resource": resource, "createdDate": "2026-03-01T10:00:00.123Z"}).encode()


def azure(password: str | None, user: str = "burrito") -> dict[str, str]:
    """A service hook's headers: no header of its own, only its basic authentication (when set)."""
    headers = {"Content-Type": "application/json; charset=utf-8"}
    if password is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    return headers


def test_azure_devops_service_hooks_are_told_by_their_body_and_verified_by_basic_auth(
        world: tuple[ApiServer, httpx.Client]) -> None:
    """Issue 30 item 6, the attack: a forged Azure DevOps service hook (no authentication, a wrong password, the
    right password in a Bearer header, a malformed one) is the one 401 and writes nothing; the hook's own basic
    authentication writes the pull request, whatever its user name, and a fork is recorded as one."""
    api, http = world

    def prs() -> dict[str, dict[str, Any]]:
        return {o["metadata"]["name"]: o["spec"] for o in api.list_objects(ann.API_VERSION, "terraformpullrequests")}

    body = azure_pull_request()
    forged = [azure(None), azure("wrong"), azure("ado-secret-"), azure(""),
              {"Authorization": "Bearer ado-secret"}, {"Authorization": "Basic !!!"},
              {"Authorization": "Basic " + base64.b64encode(b"ado-secret").decode()}]  # no user:password form
    for headers in forged:
        api.clear_requests()
        answer = http.post("/api/webhook", content=body, headers=headers)
        assert answer.status_code == 401, (headers, answer.text)
        assert not [r for r in api.requests if r.method in ("POST", "PATCH")] and prs() == {}
    answer = http.post("/api/webhook", content=body, headers=azure("ado-secret", user="anyone"))
    assert answer.status_code == 202, answer.text
    spec = prs()["ado-pr-21"]
    assert (spec["provider"], spec["project"], spec["headSha"], spec["base"], spec["fromFork"]) == (
        "azure-devops", "contoso/Platform/infra", "0123456789abcdef", "main", False)
    fork = azure_pull_request(fork=True, number=22)
    assert http.post("/api/webhook", content=fork, headers=azure("ado-secret")).status_code == 202
    assert prs()["ado-pr-22"]["fromFork"] is True
    # A body no provider claims, with no provider's header, is still a 400 naming what is missing.
    answer = http.post("/api/webhook", content=b'{"eventType": "git.push"}', headers=azure("ado-secret"))
    assert answer.status_code == 400 and "publisherId" in answer.json()["error"]


def test_attack_a_repository_naming_another_as_its_homepage_is_not_taken_for_it(
    world: tuple[ApiServer, httpx.Client],
) -> None:
    """Attack test: one secret signs the deliveries of many repositories (an organization's webhook, a GitHub
    App's: every repository it is installed on), and GitHub's `repository.homepage` is whatever the repository's
    admin writes. Someone who administers any of those repositories set its homepage to infra's URL: its deliveries
    then matched infra and verified with infra's key, so its pull requests were written as infra's, "not a fork"
    (its head is in its own repository), naming any commit infra's pull request refs hold (a fork's unapproved
    head), with the commenters of their own repository asked for write permission. A delivery is now matched by
    the URLs the provider gives for the repository itself only."""
    api, http = world
    playground = {"clone_url": "https://github.com/org/playground.git", "full_name": "org/playground",
                  "homepage": "https://github.com/Org/Infra"}
    pushed = json.dumps({"ref": "refs/heads/main", "repository": playground}).encode()
    answer = http.post("/api/webhook", content=pushed, headers=github(pushed, "right", "hp-1"))
    assert answer.status_code == 401, answer.text
    same = {"id": 99, "full_name": "org/playground"}
    opened = json.dumps({"action": "opened", "number": 3, "repository": playground,
                         "pull_request": {"number": 3, "title": "t", "html_url": "https://x/pr",
                                          "base": {"ref": "main", "repo": same},
                                          "head": {"ref": "feature", "sha": "c" * 40, "repo": same},
                                          "updated_at": "2026-03-01T10:00:00Z"}}).encode()
    answer = http.post("/api/webhook", content=opened, headers=github(opened, "right", "hp-2", event="pull_request"))
    assert answer.status_code == 401, answer.text
    assert not api.list_objects(ann.API_VERSION, "terraformpullrequests")
    assert set(marks(api).values()) == {None}


def test_attack_deliveries_an_outsider_has_the_provider_send_never_throttle_the_provider(
    world: tuple[ApiServer, httpx.Client],
) -> None:
    """Attack test: anyone can have the provider itself send deliveries to the server's public URL (a repository of
    their own with a webhook pointing here, then its ping or redeliver API in a loop; on a self-hosted GitLab or
    Gitea, one address sends every project's hooks). Those deliveries are refused (no repository here has that URL)
    and were counted against the provider's own address: past the burst, every tenant's genuine deliveries from it
    were answered 429, which GitHub never retries. Now an address that delivered a verified delivery recently is not
    throttled; an address that never did still is."""
    _api, _ = world  # its repositories and keys
    settings = server_settings(webhook_failures_per_minute=0.5, webhook_failures_burst=3,
                               forwarded_allow_ips=["127.0.0.1"])
    provider = {"X-Forwarded-For": "140.82.115.1"}
    genuine = push("https://github.com/org/infra.git")
    theirs = json.dumps({"zen": "hi", "hook_id": 1, "repository": {
        "clone_url": "https://github.com/mallory/elsewhere.git"}}).encode()
    with running_server(settings) as url, httpx.Client(base_url=url, timeout=10) as http:
        first = http.post("/api/webhook", content=genuine, headers={**github(genuine, "right", "g-1"), **provider})
        assert first.status_code == 202, first.text
        relayed = [http.post("/api/webhook", content=theirs, headers={**github(theirs, "mallorys", f"p-{i}", "ping"),
                                                                        **provider}).status_code for i in range(10)]
        assert set(relayed) == {401}, relayed
        again = genuine.replace(b'"refs/heads/main"', b'"refs/heads/dev"')
        later = http.post("/api/webhook", content=again, headers={**github(again, "right", "g-2"), **provider})
        assert later.status_code == 202, later.text
        # An address that never delivered a verified delivery is throttled as before.
        stranger = {"X-Forwarded-For": "192.0.2.66"}
        flood = [http.post("/api/webhook", content=theirs, headers={**github(theirs, "x", f"s-{i}", "ping"),
                                                                      **stranger}).status_code for i in range(5)]
        assert flood[:3] == [401] * 3 and set(flood[3:]) == {429}, flood


def test_attack_an_outsiders_long_url_or_deep_json_holds_nothing(world: tuple[ApiServer, httpx.Client]) -> None:
    """Attack test: anyone may post to the webhook endpoint. A push naming a 200,000-character `clone_url` had its URL
    read and its error redacted by a quadratic pattern before any signature can be checked, on the server's event
    loop: every webhook, REST and UI request and the health probe waited about 100 s (a few such requests a minute
    kept the server down). And a body of `[[[[…` raised a RecursionError: a 500, never counted against its source's
    refusals. Now the URL is refused at once (401, as any unknown repository), and the deep body is a 400."""
    # The chart's body limit (5 MiB), not this module's small one.
    with running_server(server_settings(max_webhook_bytes=5 * 1024 * 1024)) as url, \
            httpx.Client(base_url=url, timeout=30) as http:
        body = json.dumps({"repository": {"clone_url": "a" * 200_000}}).encode()
        started = time.monotonic()
        answer = http.post("/api/webhook", content=body, headers={"X-GitHub-Event": "push"})
        assert answer.status_code in (202, 401), answer.text[:300]
        assert time.monotonic() - started < 5.0
        assert len(answer.text) < 1000  # nothing of the URL echoed
        assert http.get("/healthz").status_code == 200
        deep = http.post("/api/webhook", content=b"[" * 5000, headers={"X-GitHub-Event": "push"})
        assert deep.status_code == 400 and "nests JSON too deeply" in deep.json()["error"], deep.text[:300]
