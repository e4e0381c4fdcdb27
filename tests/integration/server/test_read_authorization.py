"""Issue 24, findings 2, 3 and 13 (security): every read and action of the REST API, the UI and its event streams is
authorized as the caller, and masked views never show a value that came from a Secret. Each test mounts the attack
as a tenant would: a real token of a ServiceAccount with RBAC in one namespace (the emulator enforces RBAC and
answers the server's SubjectAccessReviews), a runner's token, a flood of made-up tokens, a forged proxy header.

Each of these tests failed on the code before the fix (docs/architecture.md §11.2, §11.4 say what is checked)."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from burrito_local.identity import ensure_service_account, request_token

from burrito_py.api import annotations as ann
from burrito_py.datastore.client import DatastoreClient
from burrito_py.datastore.in_process import free_port
from burrito_py.plans.model import MASK
from burrito_py.server.serving import running_server
from tests.integration.server.rest_platform import (
    AUDIENCE,
    NETWORK_PLAN,
    NEW_APPLY,
    NS_A,
    NS_B,
    OLD_PLAN,
    PATCH_LAYERS,
    RBAC,
    READ_KINDS,
    RestPlatform,
    account,
    create,
    grant,
    run_body,
)
from tests.integration.server.ui_platform import csrf_of, logged_in, running_ui_platform, status

PASSWORD = "Tr0ub4dor&3-from-a-secret"  # a varsFrom Secret's value, in an ordinary (not sensitive) variable
SECRET_RUN = "app-plan-secret"
SECRET_LOG = f"terraform plan\nconnecting to postgres://app:{PASSWORD}@db:5432\ndone\n".encode()
# What `show -json` writes for a plan whose variable db_password came from a Secret: the value in `variables`, in
# the attributes it flows into (not marked sensitive), in the prior state, in an output, in the configuration.
SECRET_PLAN: dict[str, Any] = {
    "format_version": "1.2", "terraform_version": "1.11.4", "applyable": True, "errored": False,
    "variables": {"db_password": {"value": PASSWORD}, "region": {"value": "eu-west-3"}},
    "resource_changes": [{
        "address": "terraform_data.db", "mode": "managed", "type": "terraform_data", "name": "db",
        "provider_name": "terraform.io/builtin/terraform",
        "change": {"actions": ["update"], "before": {"input": "postgres://app:old@db"},
                   "after": {"input": f"postgres://app:{PASSWORD}@db", "triggers_replace": [PASSWORD]},
                   "after_unknown": {}, "before_sensitive": {}, "after_sensitive": {}}}],
    "output_changes": {"dsn": {"actions": ["update"], "before": "x", "after": f"app:{PASSWORD}",
                               "before_sensitive": False, "after_sensitive": False}},
    "prior_state": {"values": {"root_module": {"resources": [{"address": "terraform_data.db",
                                                              "values": {"input": f"app:{PASSWORD}"}}]}}},
    "configuration": {"root_module": {"variables": {"db_password": {"default": PASSWORD}, "region": {}}}},
}
SECRET_PRETTY = (f'  # terraform_data.db will be updated in-place\n  ~ resource "terraform_data" "db" {{\n'
                 f'      ~ input = "postgres://app:old@db" -> "postgres://app:{PASSWORD}@db"\n    }}\n'
                 f'Changes to Outputs:\n  ~ dsn = "x" -> "app:{PASSWORD}"\n').encode()
SECRET_INPUTS = {"digest": "sha256:" + "0" * 64, "variables": {"db_password": PASSWORD}, "sensitive": [],
                 "secretVariables": ["db_password"]}

TEAM_B_ROUTES = [
    f"/api/layers/{NS_B}/network",
    f"/api/layers/{NS_B}/network/runs",
    f"/api/layers/{NS_B}/does-not-exist",  # the same 403: nothing says whether it exists
    f"/api/runs/{NS_B}/{NETWORK_PLAN}",
    f"/api/runs/{NS_B}/{NETWORK_PLAN}/attempts/1/logs",
    f"/api/runs/{NS_B}/{NETWORK_PLAN}/plan?format=pretty",
    f"/api/runs/{NS_B}/{NETWORK_PLAN}/plan?format=json",
    f"/api/runs/{NS_B}/{NETWORK_PLAN}/plan?format=short",
    f"/api/runs/{NS_B}/{NETWORK_PLAN}/plan?format=masked-json",
    f"/api/runs/{NS_B}/no-such-run/plan",
    f"/api/layers?namespace={NS_B}",
]
TEAM_B_PAGES = [
    f"/ui/layers/{NS_B}/network",
    f"/ui/layers/{NS_B}/does-not-exist",
    f"/ui/runs/{NS_B}/{NETWORK_PLAN}",
    f"/ui/runs/{NS_B}/{NETWORK_PLAN}/attempts/1/logs",
    f"/ui/runs/{NS_B}/{NETWORK_PLAN}/plan",
    f"/ui/runs/{NS_B}/{NETWORK_PLAN}/plan/download?format=json",
    f"/ui/runs/{NS_B}/{NETWORK_PLAN}/plan/download?format=pretty",
    f"/ui/runs/{NS_B}/{NETWORK_PLAN}/events",
]


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestPlatform]:
    with running_ui_platform(tmp_path_factory.mktemp("authz")) as p:
        kube = p.kube
        # A Secret-fed plan of team-a/app, as the runner and the controllers store it.
        create(kube, "terraformruns", NS_A, run_body(SECRET_RUN, "app", "plan", "abc123"))
        status(kube, "terraformruns", NS_A, SECRET_RUN, {"state": "Succeeded", "attempts": [
            {"podName": f"{SECRET_RUN}-1", "number": 1, "logsUploaded": True, "exitCode": 0}]})
        with DatastoreClient(p.datastore_url, token=p.tokens["controller"]) as store:
            store.put_inputs(NS_A, "app", SECRET_RUN, json.dumps(SECRET_INPUTS).encode())
            store.put_plan(NS_A, "app", SECRET_RUN, 1, "json", json.dumps(SECRET_PLAN).encode())
            store.put_plan(NS_A, "app", SECRET_RUN, 1, "pretty", SECRET_PRETTY)
            store.put_plan(NS_A, "app", SECRET_RUN, 1, "short", b"Plan: 0 to add, 1 to change, 0 to destroy")
            store.put_logs(NS_A, "app", SECRET_RUN, 1, SECRET_LOG)
        # A pull request in team-b (team-a's is in ui_platform), and a tenant of team-b who reads there only.
        create(kube, "terraformpullrequests", NS_B, {
            "kind": "TerraformPullRequest", "metadata": {"name": "infra-pr-9"},
            "spec": {"provider": "github", "repository": "infra", "project": "org/secret-project", "number": 9,
                     "base": "main", "headBranch": "b", "headSha": "abcdef0123456789", "title": "team-b only",
                     "url": "https://github.com/org/secret-project/pull/9"}})
        ensure_service_account(kube, NS_B, "tenant")
        grant(kube, "tenant", [READ_KINDS, PATCH_LAYERS], account(NS_B, "tenant"), NS_B)
        p.tokens["tenant-b"] = request_token(kube, NS_B, "tenant", [AUDIENCE])
        yield p


def annotations(platform: RestPlatform, namespace: str, name: str) -> dict[str, str]:
    return platform.layer(namespace, name)["metadata"].get("annotations") or {}


# -- finding 2: REST reads -----------------------------------------------------------------------------------
@pytest.mark.parametrize("route", TEAM_B_ROUTES)
def test_a_tenant_of_team_a_reads_nothing_of_team_b_through_rest(platform: RestPlatform, route: str) -> None:
    with platform.client("tenant-a") as client:
        answer = client.get(route)
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error.startswith(f"system:serviceaccount:{NS_A}:tenant may not ") and f"namespace {NS_B}" in error
    assert "network" not in error  # nothing of the object, just the permission


def test_the_layers_list_shows_only_namespaces_the_caller_may_list(platform: RestPlatform) -> None:
    with platform.client("tenant-a") as client:
        layers = client.get("/api/layers").json()
    assert {layer["namespace"] for layer in layers} == {NS_A}
    with platform.client("nobody") as client:
        assert client.get("/api/layers").json() == []
    with platform.client("person") as client:  # a cluster-wide grant sees every namespace
        assert {layer["namespace"] for layer in client.get("/api/layers").json()} >= {NS_A, NS_B}


def test_a_run_of_team_b_naming_team_a_s_layer_reads_none_of_team_a_s_artifacts(platform: RestPlatform) -> None:
    """A team-b tenant who may create runs names team-a's layer in one, under the name of a team-a run: the server
    would read team-a's plan and log with its own admin token (then: unless the caller may get runs in team-a too;
    masked by the look-alike run's status, which never lists what team-a's own run's pods got from Secrets). Such a
    run is never run by the controllers, so it has no plans or logs at all: whoever asks."""
    body = run_body(OLD_PLAN, "app", "plan", "abc123")
    body["spec"]["layer"]["namespace"] = NS_A
    create(platform.kube, "terraformruns", NS_B, body)
    try:
        for identity in ("tenant-b", "person"):  # person: may get runs in every namespace
            with platform.client(identity) as client:
                assert client.get(f"/api/runs/{NS_B}/{OLD_PLAN}").status_code == 200  # its own run: fine
                for route in (f"/api/runs/{NS_B}/{OLD_PLAN}/plan", f"/api/runs/{NS_B}/{OLD_PLAN}/attempts/1/logs"):
                    answer = client.get(route)
                    assert answer.status_code == 404, (identity, route, answer.text)
                    assert "a run works only for a layer of its own namespace" in answer.json()["error"]
    finally:
        platform.kube.delete(f"/apis/{ann.API_VERSION}/namespaces/{NS_B}/terraformruns/{OLD_PLAN}")


@pytest.mark.parametrize("route", [
    "/api/layers", f"/api/layers/{NS_A}/app", f"/api/layers/{NS_A}/app/runs", f"/api/runs/{NS_A}/{OLD_PLAN}",
    f"/api/runs/{NS_A}/{OLD_PLAN}/attempts/1/logs", f"/api/runs/{NS_A}/{OLD_PLAN}/plan",
    f"/api/runs/{NS_A}/{SECRET_RUN}/plan?format=json", f"/api/runs/{NS_B}/{NETWORK_PLAN}/plan?format=json",
])
def test_a_runner_token_reads_nothing(platform: RestPlatform, route: str) -> None:
    """Tenant code holds its runner's token; the runner's Role lets it get team-a's runs, which a
    SubjectAccessReview alone would allow."""
    with platform.client("runner") as client:
        answer = client.get(route)
    assert answer.status_code == 403, answer.text
    assert "is a runner" in answer.json()["error"]


def test_a_runner_token_cannot_log_in_to_the_ui(platform: RestPlatform) -> None:
    with httpx.Client(base_url=platform.server_url) as browser:
        form = browser.get("/ui/login")
        answer = browser.post("/ui/login", data={"csrf": csrf_of(form.text), "token": platform.tokens["runner"]})
        assert answer.status_code == 403 and "is a runner" in answer.text
        assert "burrito_py_session" not in browser.cookies


# -- finding 3: actions ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("identity", "namespace", "layer"), [
    ("nobody", NS_A, "app"), ("tenant-a", NS_B, "network"), ("auditor", NS_A, "app"), ("runner", NS_A, "app")])
def test_sync_without_patch_is_403_and_writes_nothing(platform: RestPlatform, identity: str, namespace: str,
                                                      layer: str) -> None:
    before = platform.layer(namespace, layer)["metadata"]["resourceVersion"]
    with platform.client(identity) as client:
        answer = client.post(f"/api/layers/{namespace}/{layer}/sync")
        override = client.post(f"/api/layers/{namespace}/{layer}/override", json={"planSum": "sha256:" + "a" * 64})
    assert answer.status_code == 403, answer.text
    assert override.status_code == 403, override.text
    assert platform.layer(namespace, layer)["metadata"]["resourceVersion"] == before
    assert ann.SYNC_NOW not in annotations(platform, namespace, layer)


def test_a_tenant_syncs_its_own_layer(platform: RestPlatform) -> None:
    with platform.client("tenant-b") as client:
        assert client.post(f"/api/layers/{NS_B}/network/sync").status_code == 202
    assert ann.SYNC_NOW in annotations(platform, NS_B, "network")


# -- finding 2: Secret-fed values in masked views ----------------------------------------------------------------
def test_no_masked_rest_view_shows_a_secret_fed_value(platform: RestPlatform) -> None:
    with platform.client("tenant-a") as client:
        for fmt in ("pretty", "short", "masked-json"):
            answer = client.get(f"/api/runs/{NS_A}/{SECRET_RUN}/plan", params={"format": fmt})
            assert answer.status_code == 200, (fmt, answer.text)
            assert PASSWORD not in answer.text, fmt
        masked = client.get(f"/api/runs/{NS_A}/{SECRET_RUN}/plan", params={"format": "masked-json"}).json()
        assert masked["variables"] == {"db_password": {"value": MASK}, "region": {"value": "eu-west-3"}}
        assert masked["resource_changes"][0]["change"]["after"] == {
            "input": f"postgres://app:{MASK}@db", "triggers_replace": [MASK]}
        assert "prior_state" not in masked and "configuration" not in masked
        pretty = client.get(f"/api/runs/{NS_A}/{SECRET_RUN}/plan").text
        assert f'"postgres://app:{MASK}@db"' in pretty
        log = client.get(f"/api/runs/{NS_A}/{SECRET_RUN}/attempts/1/logs")
        assert log.status_code == 200 and PASSWORD not in log.text and f"app:{MASK}@db" in log.text
        raw = client.get(f"/api/runs/{NS_A}/{SECRET_RUN}/plan", params={"format": "json"})
        assert raw.status_code == 403 and f"get secrets in the namespace {NS_A}" in raw.json()["error"]
        assert "masked-json" in raw.json()["error"]
    with platform.client("auditor") as client:  # who may read team-a's Secrets reads the stored JSON
        raw = client.get(f"/api/runs/{NS_A}/{SECRET_RUN}/plan", params={"format": "json"})
        assert raw.status_code == 200 and json.loads(raw.content) == SECRET_PLAN


def test_no_ui_page_or_download_shows_a_secret_fed_value(platform: RestPlatform) -> None:
    client, _ = logged_in(platform, "tenant-a")
    with contextlib.closing(client):
        for page in (f"/ui/runs/{NS_A}/{SECRET_RUN}/plan", f"/ui/runs/{NS_A}/{SECRET_RUN}",
                     f"/ui/runs/{NS_A}/{SECRET_RUN}/plan/download?format=json",
                     f"/ui/runs/{NS_A}/{SECRET_RUN}/plan/download?format=pretty",
                     f"/ui/runs/{NS_A}/{SECRET_RUN}/attempts/1/logs"):
            answer = client.get(page)
            assert answer.status_code == 200, (page, answer.text[:300])
            assert PASSWORD not in answer.text and "Tr0ub4dor" not in answer.text, page
            assert MASK in answer.text.replace("&#34;", '"'), page
        download = client.get(f"/ui/runs/{NS_A}/{SECRET_RUN}/plan/download?format=json").json()
        assert download["variables"]["db_password"] == {"value": MASK}


def test_attack_a_look_alike_run_shows_no_earlier_runs_artifacts_unmasked(platform: RestPlatform) -> None:
    """Attack test: a run's masked views hide what its own status says its pods got from a Secret through the
    environment (`status.attempts[].secretVariables`), and read the artifacts stored under its name. Once such a run
    was trimmed from the layer's history (its artifacts kept: retention is off by default), a tenant who may create
    runs but not read Secrets made a run of the same name that the controllers never ran (its status lists no
    attempt, so nothing to hide), and read the earlier run's plan and log through it, the Secret's value unmasked.
    Now masked views show only what the run's own recorded attempts stored."""
    run = "app-plan-env-fed"
    plan = {**SECRET_PLAN, "configuration": {}}
    with DatastoreClient(platform.datastore_url, token=platform.tokens["controller"]) as store:
        store.put_inputs(NS_A, "app", run, json.dumps({**SECRET_INPUTS, "variables": {},
                                                        "secretVariables": []}).encode())
        store.put_plan(NS_A, "app", run, 1, "json", json.dumps(plan).encode())
        store.put_plan(NS_A, "app", run, 1, "pretty", SECRET_PRETTY)
        store.put_logs(NS_A, "app", run, 1, SECRET_LOG)
    views = [f"/api/runs/{NS_A}/{run}/plan?format={fmt}" for fmt in ("pretty", "masked-json")] + [
        f"/api/runs/{NS_A}/{run}/attempts/1/logs"]
    pages = [f"/ui/runs/{NS_A}/{run}/plan", f"/ui/runs/{NS_A}/{run}/plan/download?format=pretty",
             f"/ui/runs/{NS_A}/{run}/attempts/1/logs"]
    path = f"/apis/{ann.API_VERSION}/namespaces/{NS_A}/terraformruns/{run}"
    # The run that stored them: its pods got db_password from a Secret through the environment, and its views hide it.
    create(platform.kube, "terraformruns", NS_A, run_body(run, "app", "plan", "abc123"))
    status(platform.kube, "terraformruns", NS_A, run, {"state": "Succeeded", "attempts": [
        {"podName": f"{run}-1", "number": 1, "logsUploaded": True, "exitCode": 0, "secretVariables": ["db_password"]}]})
    ui, _ = logged_in(platform, "tenant-a")

    def every_view_answers(expected: int) -> None:
        with platform.client("tenant-a") as client:
            answers = [(route, client.get(route)) for route in views] + [(page, ui.get(page)) for page in pages]
        for where, answer in answers:
            assert answer.status_code == expected and PASSWORD not in answer.text, (where, answer.text[:300])

    try:
        every_view_answers(200)
        # Trimmed from history, then made again by the tenant: never run, its status records no attempt.
        platform.kube.delete(path)
        create(platform.kube, "terraformruns", NS_A, run_body(run, "app", "plan", "abc123"))
        every_view_answers(404)
    finally:
        ui.close()
        platform.kube.delete(path)


# -- finding 2: UI pages, lists and the event stream ---------------------------------------------------------
@pytest.mark.parametrize("page", TEAM_B_PAGES)
def test_a_tenant_of_team_a_reads_nothing_of_team_b_through_the_ui(platform: RestPlatform, page: str) -> None:
    client, _ = logged_in(platform, "tenant-a")
    with contextlib.closing(client):
        answer = client.get(page)
    assert answer.status_code == 403, answer.text[:300]
    assert f"namespace {NS_B}" in answer.text and "MaxRetriesReached" not in answer.text


def test_the_ui_lists_only_namespaces_the_user_may_list(platform: RestPlatform) -> None:
    client, _ = logged_in(platform, "tenant-a")
    with contextlib.closing(client):
        layers = client.get("/ui/layers").text
        assert 'data-layer="team-a/app"' in layers
        assert not re.search(r'data-layer="(?!team-a/)', layers), "a row of another namespace"
        assert "bulk" not in layers and NS_B not in layers  # nor in the namespace list
        assert client.get("/ui/layers", params={"namespace": NS_B}).text.count("data-layer=") == 0
        approvals = client.get("/ui/approvals").text
        assert f'id="approval-{NS_A}-app"' in approvals
        pulls = client.get("/ui/pull-requests").text
        assert "org/infra#7" in pulls and "secret-project" not in pulls and "team-b only" not in pulls


def _first_row_event(lines: Iterator[str]) -> dict[str, Any]:
    event = ""
    for line in lines:
        if line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line.startswith("data:") and event == "row":
            found: dict[str, Any] = json.loads(line.split(":", 1)[1])
            return found
    raise AssertionError("the stream ended without a row")


def test_the_layers_stream_sends_only_rows_the_user_may_list(platform: RestPlatform) -> None:
    client, _ = logged_in(platform, "tenant-a")
    with contextlib.closing(client), client.stream("GET", "/ui/layers/events", timeout=30) as stream:
        lines = stream.iter_lines()
        assert next(lines).startswith("retry:")
        status(platform.kube, "terraformlayers", NS_B, "network", {"lastResult": "team-b's secret result"})
        status(platform.kube, "terraformlayers", "bulk", "layer-001", {"lastResult": "bulk's result"})
        status(platform.kube, "terraformlayers", NS_A, "app", {"lastResult": "team-a's result"})
        row = _first_row_event(lines)
        assert row["id"] == f"layer:{NS_A}/app" and "team-a&#39;s result" in row["html"]


# -- finding 13: streams end when access goes, and are bounded -------------------------------------------------
@pytest.fixture(scope="module")
def strict_server(platform: RestPlatform) -> Iterator[str]:
    """A server that re-checks streams every half second, remembers tokens one second and allows two live views
    per user: what the chart's defaults do in 30 s, 30 s and 8."""
    assert platform.settings is not None
    settings = platform.settings.model_copy(update={
        "port": free_port(), "ui_stream_recheck_seconds": 0.5, "auth_cache_ttl_seconds": 1.0,
        "ui_max_streams_per_user": 2, "ui_stream_max_seconds": 600.0})
    with running_server(settings) as url:
        yield url


def _revocable(platform: RestPlatform, name: str) -> str:
    ensure_service_account(platform.kube, NS_A, name)
    grant(platform.kube, name, [READ_KINDS], account(NS_A, name), NS_A)
    return request_token(platform.kube, NS_A, name, [AUDIENCE])


def _login(url: str, token: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=30)
    form = client.get("/ui/login")
    assert client.post("/ui/login", data={"csrf": csrf_of(form.text), "token": token}).status_code == 303
    return client


def _ends_within(stream: httpx.Response, seconds: float) -> float:
    """Read the stream until the server ends it; how long that took."""
    started = time.monotonic()
    done = threading.Event()

    def read() -> None:
        with contextlib.suppress(httpx.HTTPError):
            for _ in stream.iter_lines():
                pass
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(seconds), f"the stream was still open after {seconds} s"
    return time.monotonic() - started


def test_a_run_stream_ends_when_the_users_access_is_revoked(platform: RestPlatform, strict_server: str) -> None:
    token = _revocable(platform, "revoked-rbac")
    with contextlib.closing(_login(strict_server, token)) as client, client.stream(
            "GET", f"/ui/runs/{NS_A}/{NEW_APPLY}/events", timeout=60) as stream:
        assert stream.status_code == 200
        platform.kube.delete(f"{RBAC}/namespaces/{NS_A}/rolebindings/revoked-rbac").raise_for_status()
        # The SubjectAccessReview cache (10 s) plus a re-check.
        assert _ends_within(stream, 20) < 20
        assert client.get(f"/ui/runs/{NS_A}/{NEW_APPLY}/events").status_code == 403  # the browser's reconnection


def test_a_layers_stream_ends_when_the_users_token_is_revoked(platform: RestPlatform, strict_server: str) -> None:
    token = _revocable(platform, "revoked-token")
    with contextlib.closing(_login(strict_server, token)) as client, client.stream(
            "GET", "/ui/layers/events", timeout=60) as stream:
        assert stream.status_code == 200
        platform.kube.delete(f"/api/v1/namespaces/{NS_A}/serviceaccounts/revoked-token").raise_for_status()
        assert _ends_within(stream, 15) < 15
        assert client.get("/ui/layers/events").status_code == 401


def test_event_streams_are_bounded_per_user(platform: RestPlatform, strict_server: str) -> None:
    token = _revocable(platform, "many-tabs")
    with contextlib.closing(_login(strict_server, token)) as client, contextlib.ExitStack() as tabs:
        for _ in range(2):
            assert tabs.enter_context(client.stream("GET", "/ui/layers/events", timeout=30)).status_code == 200
        third = client.get("/ui/layers/events")
        assert third.status_code == 429 and third.headers["retry-after"]
        assert "live views open" in third.text
    # Closed tabs give their places back.
    with contextlib.closing(_login(strict_server, token)) as client:
        deadline = time.monotonic() + 10
        while True:
            with client.stream("GET", "/ui/layers/events", timeout=30) as again:
                if again.status_code == 200 or time.monotonic() > deadline:
                    assert again.status_code == 200
                    break
            time.sleep(0.2)


# -- finding 13: throttled token reviews -------------------------------------------------------------------------
def test_a_login_flood_is_throttled(platform: RestPlatform) -> None:
    assert platform.settings is not None
    settings = platform.settings.model_copy(update={"port": free_port()})
    with running_server(settings) as url:
        known, _ = logged_in(RestPlatform(platform.api, url, platform.datastore_url, platform.kube, platform.tokens),
                             "tenant-a")
        with contextlib.closing(known), httpx.Client(base_url=url, timeout=30) as browser:
            csrf = csrf_of(browser.get("/ui/login").text)
            began = time.monotonic()
            answers = [browser.post("/ui/login", data={"csrf": csrf, "token": f"made-up-token-{i}"})
                       for i in range(30)]
            elapsed = time.monotonic() - began
            codes = [a.status_code for a in answers]
            # The burst of 20 reviews, then 429s; the bucket refills at 20 a minute while the flood lasts (on a
            # loaded machine 30 logins take seconds), and each refilled token is one more review: a 401.
            refilled = codes[20:].count(401)
            assert codes[:20] == [401] * 20 and set(codes[20:]) <= {401, 429}, codes
            assert refilled <= int(elapsed * 20 / 60) + 1, (codes, elapsed)
            throttled = [a for a in answers[20:] if a.status_code == 429]
            assert throttled, codes
            assert int(throttled[-1].headers["retry-after"]) >= 1 and "Too many attempts" in throttled[-1].text
            # Bearer tokens on the REST API share the address's budget: throttled as the logins, but for the tokens
            # the bucket refilled since the flood began (a loaded machine may take seconds to get here).
            floods = [httpx.get(f"{url}/api/layers", headers={"Authorization": f"Bearer another-made-up-token-{i}"})
                      for i in range(3)]
            since = time.monotonic() - began
            bearer_codes = [f.status_code for f in floods]
            assert 429 in bearer_codes and set(bearer_codes) <= {401, 429}, bearer_codes
            assert refilled + bearer_codes.count(401) <= int(since * 20 / 60) + 1, (codes, bearer_codes, since)
            assert all(f.headers["retry-after"] for f in floods if f.status_code == 429)
            # A user whose token the server already knows is not locked out by the flood from their address.
            assert known.get("/ui/layers").status_code == 200


# -- finding 13: Secure cookies ---------------------------------------------------------------------------------
def test_cookies_are_secure_when_the_setting_says_so_even_over_http(platform: RestPlatform) -> None:
    assert platform.settings is not None
    settings = platform.settings.model_copy(update={"port": free_port(), "ui_secure_cookies": True})
    with running_server(settings) as url, httpx.Client(base_url=url) as browser:
        form = browser.get("/ui/login")
        assert "; secure" in form.headers["set-cookie"].lower()


def test_attack_a_huge_pod_log_is_read_by_a_live_view_only_up_to_its_bound(platform: RestPlatform) -> None:
    """Tenant code in a running attempt writes a log of many MiB; every live view of its run polls `pods/log` every
    second. Before, the server read, masked and sent the whole log on each poll (its CPU and memory grew with what
    the tenant wrote); now it asks for LIVE_LOG_BYTES at most (`limitBytes`) and masks each line once."""
    run, pod = "app-apply-loud", "app-apply-loud-1"
    create(platform.kube, "terraformruns", NS_A, run_body(run, "app", "apply", "abc123"))
    status(platform.kube, "terraformruns", NS_A, run, {"state": "Running", "attempts": [{"podName": pod, "number": 1}]})
    platform.kube.post(f"/api/v1/namespaces/{NS_A}/pods", json={
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
        "spec": {"containers": [{"name": "main", "image": "runner"}]}}).raise_for_status()
    assert platform.api.pod_log_dir is not None
    log = platform.api.pod_log_dir / NS_A / pod / "main.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    line = b"null_resource.loud: Still creating... " + b"x" * 90 + b"\n"
    log.write_bytes(line * (8 * 1024 * 1024 // len(line)))  # 8 MiB
    client, _ = logged_in(platform, "tenant-a")
    texts: list[str] = []
    with contextlib.closing(client), client.stream("GET", f"/ui/runs/{NS_A}/{run}/events", timeout=30) as stream:
        assert stream.status_code == 200
        started = time.monotonic()
        try:
            for received in stream.iter_lines():
                if received.startswith("data: ") and '"attempt"' in received:
                    texts.append(json.loads(received.removeprefix("data: "))["text"])
                if "the live view stops here" in "".join(texts[-1:]) or time.monotonic() - started > 20:
                    break
        except httpx.ReadTimeout:
            pytest.fail("the live view sent nothing for 30 s: the server was busy with the whole 8 MiB log")
    sent = "".join(texts)
    assert sent.startswith(line.decode())
    assert len(sent) <= 1024 * 1024 + 200, f"the live view sent {len(sent)} bytes of an 8 MiB log"
    assert sent.endswith("the whole log is shown once the attempt ends)\n")
