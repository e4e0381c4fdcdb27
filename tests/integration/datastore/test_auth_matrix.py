"""Who may call which datastore endpoint, over real HTTP: tokens from the emulator's TokenRequest, checked
by the datastore with a real TokenReview, runner scopes read from real pods, runs and layers."""

from __future__ import annotations

import asyncio
import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from burrito_py.datastore.client import DatastoreClient, DatastoreError
from tests.integration.datastore.auth_platform import (
    ARCHIVE,
    NS,
    REVISION,
    TREE,
    AuthPlatform,
    running_auth_platform,
    token_reviews,
)


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthPlatform]:
    with running_auth_platform(tmp_path_factory.mktemp("auth")) as p:
        admin = {"Authorization": f"Bearer {p.admin_token}"}
        for layer, body in STATE_BODIES.items():  # the layers' states, as an apply would have written them
            stored = httpx.post(f"{p.url}/api/v1/layers/{NS}/{layer}/state", content=body, headers=admin)
            assert stored.status_code == 200, stored.text
        yield p


@dataclass(frozen=True)
class Call:
    endpoint: str
    target: str  # own-run | own-layer | other-layer | own-repo | other-repo
    method: str
    path: str
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()


LAYER_TARGETS = {"own-run": ("app", "app-plan-1"), "own-layer": ("app", "app-plan-0"),
                 "other-layer": ("other", "other-plan-1")}
REPO_TARGETS = {"own-repo": "repo-a", "other-repo": "repo-b"}
STATE_TARGETS = {"own-state": "app", "other-state": "other"}
STATE_BODIES = {layer: json.dumps({"version": 4, "serial": 1, "lineage": f"matrix-{layer}", "resources": []}).encode()
                for layer in STATE_TARGETS.values()}


def calls() -> list[Call]:
    out: list[Call] = []
    for target, (layer, run) in LAYER_TARGETS.items():
        base = f"/api/v1/layers/{NS}/{layer}/runs/{run}"
        out += [
            # First: the controller's delete empties the run, and the PUTs below (the seeded bodies) refill it
            # for the tests that come after the matrix.
            Call("DELETE run", target, "DELETE", base),
            Call("PUT plan", target, "PUT", f"{base}/attempts/1/plan?format=json", b'{"seeded": true}'),
            Call("GET plan", target, "GET", f"{base}/attempts/1/plan?format=json"),
            Call("HEAD plan", target, "HEAD", f"{base}/attempts/1/plan?format=json"),
            Call("GET latest plan", target, "GET", f"{base}/plan?format=json"),
            Call("PUT logs", target, "PUT", f"{base}/attempts/1/logs", b"seeded log\n"),
            Call("GET logs", target, "GET", f"{base}/attempts/1/logs"),
            Call("HEAD logs", target, "HEAD", f"{base}/attempts/1/logs"),
            Call("PUT outputs", target, "PUT", f"{base}/attempts/1/outputs", b'{"seeded": {"value": 1}}'),
            Call("GET outputs", target, "GET", f"{base}/attempts/1/outputs"),
            Call("HEAD outputs", target, "HEAD", f"{base}/attempts/1/outputs"),
            Call("PUT applied", target, "PUT", f"{base}/attempts/1/applied", b'{"sum": "sha256:00", "attempt": 1}'),
            Call("GET applied", target, "GET", f"{base}/applied"),
            Call("GET attempt applied", target, "GET", f"{base}/attempts/1/applied"),
            Call("PUT review", target, "PUT", f"{base}/attempts/1/review", b'{"planSum": "sha256:00"}'),
            Call("GET review", target, "GET", f"{base}/attempts/1/review"),
            Call("PUT inputs", target, "PUT", f"{base}/inputs", b'{"digest": "sha256:00", "variables": {}}'),
            Call("GET inputs", target, "GET", f"{base}/inputs"),
        ]
    for target, layer in STATE_TARGETS.items():
        # A managed-state layer's state (docs/architecture.md §10.6): serial 1 is stored before (the fixture), every
        # identity allowed to write posts the same bytes (200); each LOCK is released by the same identity's UNLOCK.
        base = f"/api/v1/layers/{NS}/{layer}/state"
        lock = json.dumps({"ID": f"matrix-{layer}", "Operation": "OperationTypeApply"}).encode()
        out += [
            Call("POST state", target, "POST", base, STATE_BODIES[layer]),
            Call("GET state", target, "GET", base),
            Call("LOCK state", target, "LOCK", f"{base}/lock", lock),
            Call("GET state lock", target, "GET", f"{base}/lock"),
            Call("GET state versions", target, "GET", f"{base}/versions"),
            Call("GET state version", target, "GET", f"{base}/versions/1"),
            Call("UNLOCK state", target, "UNLOCK", f"{base}/lock", lock),
        ]
    for target, repo in REPO_TARGETS.items():
        base = f"/api/v1/repositories/{NS}/{repo}"
        out += [
            Call("PUT source", target, "PUT", f"{base}/revisions/{REVISION}/source", ARCHIVE,
                 (("X-Burrito-Tree-Id", TREE),)),
            Call("GET source", target, "GET", f"{base}/revisions/{REVISION}/source"),
            Call("HEAD source", target, "HEAD", f"{base}/revisions/{REVISION}/source"),
            Call("HEAD tree", target, "HEAD", f"{base}/trees/{TREE}"),
        ]
    return out


CALLS = calls()
ENDPOINTS = {c.endpoint for c in CALLS}


def success(call: Call) -> int:
    return {"PUT": 201, "DELETE": 204}.get(call.method, 200)


# What each runner may do, spelled out rather than derived: reads of its own run and its layer's repository,
# writes of its own run's attempt only (the one its pod is recorded for: 1 for both), reads of its own run's
# inputs only; its layer's state read and locked, never written (both are plan runs: a plan never writes state).
RUNNER_ALLOWED = {
    # Another run of its layer: no (issue 24, P2: a runner reads its own run's artifacts, and an apply its plan
    # run's, so a pull request's plan and the layer's runs read none of each other's).
    "own-runner": {("own-run", "PUT"), ("own-run", "GET"), ("own-run", "HEAD"), ("own-repo", "GET"),
                   ("own-repo", "HEAD"), *(("own-state", m) for m in ("GET", "LOCK", "UNLOCK"))},
    "other-runner": {("other-layer", "PUT"), ("other-layer", "GET"), ("other-layer", "HEAD"), ("other-repo", "GET"),
                     ("other-repo", "HEAD"), *(("other-state", m) for m in ("GET", "LOCK", "UNLOCK"))},
}
OWN_RUN = {"own-runner": "own-run", "other-runner": "other-layer"}


def expected(identity: str, call: Call) -> int:
    if identity in ("none", "malformed", "garbage", "forged", "expired", "wrong-audience", "deleted-pod"):
        return 401
    if identity == "controller":
        return success(call)
    if identity in RUNNER_ALLOWED:
        if call.endpoint in ("PUT review", "PUT inputs", "DELETE run"):
            # The controllers' verdict on a plan, the run's inputs, and throwing a run away: no runner may, not
            # even for its own run.
            return 403
        if call.endpoint == "GET inputs" and call.target != OWN_RUN[identity]:
            return 403  # the inputs hold Secret values: only that run's runner reads them
        if (call.target, call.method) not in RUNNER_ALLOWED[identity]:
            return 403
        # The controllers (or an earlier runner identity) stored these very bytes: a runner's repeated write of
        # an object written once is a 200, nothing changes.
        return 200 if call.method == "PUT" else success(call)
    return 403  # stranger, impostor, default-sa-pod, previous-attempt


def authorization(platform: AuthPlatform, identity: str) -> dict[str, str]:
    if identity == "none":
        return {}
    if identity == "malformed":
        return {"Authorization": "Basic dXNlcjpwYXNz"}
    return {"Authorization": f"Bearer {platform.tokens[identity]}"}


IDENTITIES = ["none", "malformed", "garbage", "forged", "expired", "wrong-audience", "deleted-pod", "stranger",
              "impostor", "default-sa-pod", "previous-attempt", "other-runner", "own-runner", "controller"]


def test_the_matrix_covers_every_endpoint_of_the_openapi(platform: AuthPlatform) -> None:
    paths = httpx.get(f"{platform.url}/openapi.json").json()["paths"]
    operations = {(method.upper(), path) for path, item in paths.items() for method in item
                  if not path.endswith("/healthz")}
    covered = {(c.method, _template(c.path)) for c in CALLS}
    assert operations == covered


def _template(path: str) -> str:
    """/api/v1/layers/default/app/runs/r/attempts/1/plan?… → the OpenAPI path template."""
    parts = path.split("?")[0].split("/")  # ['', 'api', 'v1', 'layers', ns, layer, 'runs', run, …]
    if parts[3] == "layers" and parts[6] == "state":
        names = {4: "{ns}", 5: "{layer}", 8: "{serial}"}
    elif parts[3] == "layers":
        names = {4: "{ns}", 5: "{layer}", 7: "{run}", 9: "{n}"}
    else:
        names = {4: "{ns}", 5: "{repo}", 7: "{revision}" if parts[6] == "revisions" else "{tree}"}
    return "/".join(names.get(i, part) for i, part in enumerate(parts))


@pytest.mark.parametrize("identity", IDENTITIES)
def test_auth_matrix(platform: AuthPlatform, identity: str) -> None:
    headers = authorization(platform, identity)
    got: dict[tuple[str, str], int] = {}
    want: dict[tuple[str, str], int] = {}
    with httpx.Client(base_url=platform.url, timeout=30.0) as http:
        for call in CALLS:
            response = http.request(call.method, call.path, content=call.body,
                                    headers={**headers, **dict(call.headers)})
            got[(call.endpoint, call.target)] = response.status_code
            want[(call.endpoint, call.target)] = expected(identity, call)
            if call.method != "HEAD" and response.status_code in (401, 403):
                error = response.json()["error"]
                token = headers.get("Authorization", "").removeprefix("Bearer ")
                assert not token or token not in error
                if response.status_code == 403:
                    assert "may" in error or "neither" in error, error
            if response.status_code == 401:
                assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert got == want


def test_each_401_says_why(platform: AuthPlatform) -> None:
    reasons = {}
    with httpx.Client(base_url=platform.url, timeout=30.0) as http:
        for identity in ("none", "garbage", "forged", "expired", "wrong-audience", "deleted-pod"):
            response = http.get(f"/api/v1/layers/{NS}/app/runs/app-plan-1/attempts/1/logs",
                                headers=authorization(platform, identity))
            assert response.status_code == 401
            reasons[identity] = response.json()["error"]
    assert "Authorization: Bearer" in reasons["none"]
    assert "expired" in reasons["expired"]
    assert "audience" in reasons["wrong-audience"]
    assert "no longer exists" in reasons["deleted-pod"]
    assert "invalid bearer token" in reasons["forged"] and "invalid bearer token" in reasons["garbage"]


def test_403_names_the_caller_and_the_target(platform: AuthPlatform) -> None:
    response = httpx.put(f"{platform.url}/api/v1/layers/{NS}/other/runs/other-plan-1/attempts/1/plan?format=bin",
                         content=b"evil", headers=authorization(platform, "own-runner"))
    assert response.status_code == 403
    error = response.json()["error"]
    assert "system:serviceaccount:default:burrito-py-runner" in error
    assert "default/app run app-plan-1" in error and "default/other run other-plan-1" in error
    with DatastoreClient(platform.url, token=platform.admin_token) as store, pytest.raises(DatastoreError) as absent:
        store.get_plan(NS, "other", "other-plan-1", 1, "bin")
    assert absent.value.status_code == 404


def test_health_stays_open(platform: AuthPlatform) -> None:
    assert httpx.get(f"{platform.url}/healthz").status_code == 200
    assert httpx.get(f"{platform.url}/api/v1/healthz").status_code == 200


def test_the_client_sends_its_token_and_reports_refusals(platform: AuthPlatform) -> None:
    with DatastoreClient(platform.url, token=platform.tokens["own-runner"]) as store:
        for layer, run in (("app", "app-plan-0"), ("other", "other-plan-1")):
            with pytest.raises(DatastoreError) as refused:
                store.get_plan(NS, layer, run, 1, "json")
            assert refused.value.status_code == 403
    with DatastoreClient(platform.url) as anonymous, pytest.raises(DatastoreError) as missing:
        anonymous.get_logs(NS, "app", "app-plan-1", 1)
    assert missing.value.status_code == 401


def test_token_file_is_read_for_each_request(platform: AuthPlatform, tmp_path: Path) -> None:
    """Projected tokens rotate on disk; a long-lived client must send the current one."""
    token_file = tmp_path / "token"
    token_file.write_text(platform.tokens["garbage"] + "\n")
    with DatastoreClient(platform.url, token_file=token_file) as store:
        with pytest.raises(DatastoreError) as refused:
            store.get_logs(NS, "app", "app-plan-1", 1)
        assert refused.value.status_code == 401
        token_file.write_text(platform.admin_token + "\n")
        assert store.get_logs(NS, "app", "app-plan-1", 1) == b"seeded log\n"


def test_reviews_are_cached_and_shared(platform: AuthPlatform) -> None:
    fresh = platform.runner_token("app-plan-1-1")
    forged = platform.tokens["forged"] + "x"  # not yet seen by the cache
    before = token_reviews(platform.api)

    async def burst(token: str, n: int) -> list[int]:
        async with httpx.AsyncClient(base_url=platform.url, timeout=30.0) as http:
            responses = await asyncio.gather(*(
                http.get(f"/api/v1/layers/{NS}/app/runs/app-plan-1/attempts/1/logs",
                         headers={"Authorization": f"Bearer {token}"}) for _ in range(n)))
        return [r.status_code for r in responses]

    assert asyncio.run(burst(fresh, 20)) == [200] * 20
    assert asyncio.run(burst(fresh, 5)) == [200] * 5
    assert asyncio.run(burst(forged, 20)) == [401] * 20
    assert token_reviews(platform.api) - before == 2


def test_path_traversal_and_bad_segments_are_400_for_every_endpoint(platform: AuthPlatform) -> None:
    # http.client sends the path as written (httpx would resolve '..' and '.' before sending).
    headers = {"Authorization": f"Bearer {platform.admin_token}"}
    bad = ["..", "%2e%2e", "..%2Fetc", "a%2Fb", "a%5Cb", ".", "a..b", "Bad", "-x", "x_y"]
    refused: dict[str, int] = {}
    host, port = urlsplit(platform.url).hostname, urlsplit(platform.url).port
    for call in {c.endpoint: c for c in CALLS if c.target in ("own-run", "own-repo", "own-state")}.values():
        parts = call.path.split("?")[0].split("/")
        query = "?" + call.path.split("?")[1] if "?" in call.path else ""
        # namespace, layer|repository, run|revision|tree (a state's path has no third name)
        for position in (4, 5) if call.target == "own-state" else (4, 5, 7):
            for value in bad:
                if value in ("x_y", "Bad") and parts[6] in ("revisions", "trees") and position == 7:
                    continue  # revisions and tree ids may hold '_' and capitals
                path = "/".join(value if i == position else p for i, p in enumerate(parts)) + query
                connection = http.client.HTTPConnection(host or "127.0.0.1", port, timeout=30)
                try:
                    connection.request(call.method, path, body=call.body, headers={**headers, **dict(call.headers)})
                    response = connection.getresponse()
                    body = response.read()
                finally:
                    connection.close()
                refused[f"{call.method} {path}"] = response.status
                if call.method != "HEAD" and response.status == 400:
                    assert "invalid" in json.loads(body)["error"], path
    assert set(refused.values()) == {400}, {k: v for k, v in refused.items() if v != 400}
    stored = {p.relative_to(platform.data_dir).parts[:3] for p in platform.data_dir.rglob("*") if p.is_file()}
    assert stored <= {("layers", NS, "app"), ("layers", NS, "other"), ("sources", NS, "repo-a"),
                      ("sources", NS, "repo-b"), ("states", NS, "app"), ("states", NS, "other")}


def test_the_runs_own_runner_may_not_delete_it_and_nothing_is_deleted(platform: AuthPlatform) -> None:
    """Throwing a run away is the controllers' call: the runner whose pod the run records gets a 403 too."""
    with DatastoreClient(platform.url, token=platform.tokens["own-runner"]) as runner:
        with pytest.raises(DatastoreError) as refused:
            runner.delete_run(NS, "app", "app-plan-1")
        assert refused.value.status_code == 403
        assert "may not delete a run's artifacts" in str(refused.value)
        assert runner.get_plan(NS, "app", "app-plan-1", 1, "json") == b'{"seeded": true}'
        assert runner.get_inputs(NS, "app", "app-plan-1") == b'{"digest": "sha256:00", "variables": {}}'
