"""The server's REST API (docs/architecture.md §11.2) over real HTTP with auth on: tokens from the emulator's
TokenRequest checked by a real TokenReview, reads and actions authorized by the emulator's RBAC through
SubjectAccessReviews, layers and runs read live from the emulator, plans and logs from a datastore with auth on.
Who may not read what: test_read_authorization.py."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from burrito_local.identity import request_token

from burrito_py.api import annotations as ann
from burrito_py.datastore.client import DatastoreClient
from burrito_py.datastore.in_process import free_port
from burrito_py.server.serving import running_server
from burrito_py.timeutil import parse_time, utcnow
from tests.integration.server.rest_platform import (
    AUDIENCE,
    FIRST_ATTEMPT_SHORT,
    LOG_1,
    LOG_2,
    NETWORK_LOG,
    NETWORK_PLAN,
    NEW_APPLY,
    NS_A,
    NS_B,
    OLD_PLAN,
    PLAN_JSON,
    PLAN_PRETTY,
    PLAN_SHORT,
    REPO_URL_REDACTED_HOST,
    STRAY,
    RestPlatform,
    create,
    run_body,
    running_rest_platform,
)

READ_ROUTES = [
    "/api/layers",
    f"/api/layers/{NS_A}/app",
    f"/api/layers/{NS_A}/app/runs",
    f"/api/runs/{NS_A}/{OLD_PLAN}",
    f"/api/runs/{NS_A}/{OLD_PLAN}/attempts/1/logs",
    f"/api/runs/{NS_A}/{OLD_PLAN}/plan",
]


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestPlatform]:
    with running_rest_platform(tmp_path_factory.mktemp("rest")) as p:
        yield p


@pytest.fixture(scope="module")
def http(platform: RestPlatform) -> Iterator[httpx.Client]:
    with platform.client("person") as client:
        yield client


def _patches(platform: RestPlatform) -> list[str]:
    return [r.path for r in list(platform.api.requests) if r.method in ("PATCH", "PUT", "POST")
            and "/terraformlayers" in r.path]


# -- authentication ----------------------------------------------------------------------------------
@pytest.mark.parametrize("route", [*READ_ROUTES, f"POST /api/layers/{NS_A}/app/sync"])
def test_no_token_is_401_with_a_clear_message(platform: RestPlatform, route: str) -> None:
    method, _, url = route.rpartition(" ")
    with platform.client(None) as anonymous:
        answer = anonymous.request(method or "GET", url)
    assert answer.status_code == 401, answer.text
    assert answer.json() == {"error": "missing credentials: send 'Authorization: Bearer <service-account token>'"}
    assert answer.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("identity", ["expired", "forged", "garbage", "wrong-audience"])
def test_a_token_the_kubernetes_api_rejects_is_401(platform: RestPlatform, identity: str) -> None:
    with platform.client(identity) as client:
        for route in READ_ROUTES:
            answer = client.get(route)
            assert answer.status_code == 401, (route, answer.text)
            assert answer.json()["error"] and platform.tokens[identity] not in answer.text
        platform.api.clear_requests()
        assert client.post(f"/api/layers/{NS_A}/app/sync").status_code == 401
    assert platform.layer(NS_A, "app")["metadata"]["annotations"].get(ann.SYNC_NOW) is None
    assert _patches(platform) == []


def test_a_bearer_scheme_without_token_and_another_scheme_are_401(platform: RestPlatform) -> None:
    with platform.client(None) as client:
        for header in ("Bearer", "Basic dXNlcjpwYXNz", platform.tokens["person"]):
            answer = client.get("/api/layers", headers={"Authorization": header})
            assert answer.status_code == 401, (header, answer.text)
            assert "missing credentials" in answer.json()["error"]


def test_an_identity_granted_reads_reads(platform: RestPlatform) -> None:
    with platform.client("person") as client:
        for route in READ_ROUTES:
            assert client.get(route).status_code == 200, route


# -- layers ---------------------------------------------------------------------------------------------
def test_list_shows_state_last_result_last_run_and_repository(http: httpx.Client) -> None:
    answer = http.get("/api/layers")
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    layers = answer.json()
    assert [(item["namespace"], item["name"]) for item in layers] == [(NS_A, "app"), (NS_B, "network")]
    app, network = layers
    assert app["state"] == "ApplyNeeded"
    assert app["lastResult"] == PLAN_SHORT.decode()
    assert app["lastRun"] == {"name": NEW_APPLY, "action": "apply", "date": "2026-01-02T03:07:00Z",
                              "revision": "abc123"}
    assert app["repository"]["namespace"] == NS_A and app["repository"]["name"] == "infra"
    assert app["repository"]["state"] == "Synced"
    assert REPO_URL_REDACTED_HOST in app["repository"]["url"] and "hunter2" not in answer.text
    assert app["branch"] == "main" and app["path"] == "app"
    assert app["planRun"] == f"{OLD_PLAN}/2" and app["planSummary"] == PLAN_SHORT.decode()
    assert "conditions" not in app  # the detail has them
    assert network["state"] == "MaxRetriesReached" and network["lastResult"] == "Plan failed"
    assert network["lastRun"]["name"] == NETWORK_PLAN
    # team-b's layer uses team-a's repository.
    assert network["repository"]["namespace"] == NS_A and network["repository"]["url"] == app["repository"]["url"]


def test_list_filters_by_namespace(http: httpx.Client) -> None:
    network = http.get("/api/layers", params={"namespace": NS_B}).json()
    assert [item["name"] for item in network] == ["network"]
    # Its repository is in team-a, outside the filter: still shown.
    assert network[0]["repository"]["url"] and network[0]["repository"]["state"] == "Synced"
    assert [item["name"] for item in http.get("/api/layers", params={"namespace": NS_A}).json()] == ["app"]
    assert http.get("/api/layers", params={"namespace": "nobody-here"}).json() == []


def test_layer_detail_has_conditions_and_dependencies(http: httpx.Client) -> None:
    answer = http.get(f"/api/layers/{NS_A}/app")
    assert answer.status_code == 200
    detail = answer.json()
    assert detail["state"] == "ApplyNeeded" and detail["repository"]["state"] == "Synced"
    assert detail["conditions"] == [
        {"type": "IsPlanArtifactUpToDate", "status": "True", "reason": "PlanIsRecent", "message": "planned abc123",
         "lastTransitionTime": "2026-01-02T03:04:05Z"},
        {"type": "IsRunning", "status": "True", "reason": "RunIsRunning", "message": "",
         "lastTransitionTime": "2026-01-02T03:04:05Z"},
    ]
    assert http.get(f"/api/layers/{NS_B}/network").json()["conditions"][0]["type"] == "HasFailed"
    assert detail["dependencies"] == [{"name": f"{NS_B}/network", "state": "MaxRetriesReached",
                                       "appliedRevision": None, "satisfied": False, "reason": "UpstreamFailed",
                                       "message": f"{NS_B}/network cannot apply"}]
    assert http.get(f"/api/layers/{NS_B}/network").json()["dependencies"] == []


@pytest.mark.parametrize(("route", "message"), [
    (f"/api/layers/{NS_A}/missing", f"TerraformLayer {NS_A}/missing not found"),
    (f"/api/layers/{NS_B}/app", f"TerraformLayer {NS_B}/app not found"),
    (f"/api/layers/{NS_A}/missing/runs", f"TerraformLayer {NS_A}/missing not found"),
    (f"/api/runs/{NS_A}/missing", f"TerraformRun {NS_A}/missing not found"),
    (f"/api/runs/{NS_B}/{OLD_PLAN}", f"TerraformRun {NS_B}/{OLD_PLAN} not found"),
    (f"/api/runs/{NS_A}/missing/plan", f"TerraformRun {NS_A}/missing not found"),
    (f"/api/runs/{NS_A}/missing/attempts/1/logs", f"TerraformRun {NS_A}/missing not found"),
])
def test_404s_name_the_object(http: httpx.Client, route: str, message: str) -> None:
    answer = http.get(route)
    assert answer.status_code == 404, answer.text
    assert answer.json() == {"error": message}


# -- runs ------------------------------------------------------------------------------------------------
def test_a_layers_runs_newest_first(http: httpx.Client) -> None:
    runs = http.get(f"/api/layers/{NS_A}/app/runs").json()
    # Created in that order a second apart: newest first, not by name.
    assert [run["name"] for run in runs] == [NEW_APPLY, OLD_PLAN]
    assert parse_time(runs[0]["created"]) > parse_time(runs[1]["created"])  # type: ignore[operator]
    apply, plan = runs
    assert apply["action"] == "apply" and apply["state"] == "Running" and apply["layer"] == "app"
    assert plan["state"] == "Succeeded" and plan["retries"] == 1 and plan["revision"] == "abc123"
    assert [a["number"] for a in plan["attempts"]] == [1, 2]
    assert "conditions" not in plan  # the detail has them
    # A run labelled for team-b/network whose spec names another layer is not network's.
    assert [run["name"] for run in http.get(f"/api/layers/{NS_B}/network/runs").json()] == [NETWORK_PLAN]
    assert STRAY not in [run["name"] for run in http.get(f"/api/layers/{NS_A}/app/runs").json()]


def test_run_detail_has_attempts_and_conditions(http: httpx.Client) -> None:
    answer = http.get(f"/api/runs/{NS_A}/{OLD_PLAN}")
    assert answer.status_code == 200
    run = answer.json()
    assert run["namespace"] == NS_A and run["layer"] == "app" and run["layerNamespace"] == NS_A
    assert run["state"] == "Succeeded" and run["runnerPod"] == f"{OLD_PLAN}-2"
    assert run["lastRun"] == "2026-01-02T03:05:00Z"
    assert run["attempts"] == [
        {"number": 1, "podName": f"{OLD_PLAN}-1", "startedAt": "2026-01-02T03:04:00Z",
         "finishedAt": "2026-01-02T03:04:30Z", "logsUploaded": True, "exitCode": 1},
        {"number": 2, "podName": f"{OLD_PLAN}-2", "startedAt": "2026-01-02T03:05:00Z",
         "finishedAt": "2026-01-02T03:06:00Z", "logsUploaded": True, "exitCode": 0},
    ]
    assert [c["reason"] for c in run["conditions"]] == ["PlanSucceeded"]
    apply = http.get(f"/api/runs/{NS_A}/{NEW_APPLY}").json()
    assert apply["artifact"] == f"{OLD_PLAN}/2" and apply["action"] == "apply"
    assert apply["attempts"] == [{"number": 1, "podName": f"{NEW_APPLY}-1", "startedAt": None, "finishedAt": None,
                                  "logsUploaded": False, "exitCode": None}]


# -- logs and plans ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("route", "body"), [
    (f"/api/runs/{NS_A}/{OLD_PLAN}/attempts/1/logs", LOG_1),
    (f"/api/runs/{NS_A}/{OLD_PLAN}/attempts/2/logs", LOG_2),
    (f"/api/runs/{NS_B}/{NETWORK_PLAN}/attempts/1/logs", NETWORK_LOG),
])
def test_logs_are_the_uploaded_bytes(http: httpx.Client, route: str, body: bytes) -> None:
    answer = http.get(route)
    assert answer.status_code == 200, answer.text
    assert answer.content == body
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"


def test_missing_logs_are_404_naming_the_attempt(http: httpx.Client) -> None:
    answer = http.get(f"/api/runs/{NS_A}/{NEW_APPLY}/attempts/1/logs")
    assert answer.status_code == 404
    assert answer.json()["error"].startswith(f"no logs for attempt 1 of TerraformRun {NS_A}/{NEW_APPLY}")
    assert http.get(f"/api/runs/{NS_A}/{OLD_PLAN}/attempts/3/logs").status_code == 404


@pytest.mark.parametrize(("fmt", "body", "media", "identity"), [
    (None, PLAN_PRETTY, "text/plain; charset=utf-8", "person"),
    ("pretty", PLAN_PRETTY, "text/plain; charset=utf-8", "person"),
    ("json", PLAN_JSON, "application/json", "auditor"),  # the stored JSON: who may read team-a's Secrets
    ("short", PLAN_SHORT, "text/plain; charset=utf-8", "tenant-a"),
])
def test_each_plan_format_is_the_latest_attempts_uploaded_bytes(
    platform: RestPlatform, fmt: str | None, body: bytes, media: str, identity: str
) -> None:
    params = {"format": fmt} if fmt else {}
    with platform.client(identity) as client:
        answer = client.get(f"/api/runs/{NS_A}/{OLD_PLAN}/plan", params=params)
    assert answer.status_code == 200, answer.text
    assert answer.content == body  # attempt 2's, not attempt 1's (FIRST_ATTEMPT_SHORT)
    assert answer.content != FIRST_ATTEMPT_SHORT
    assert answer.headers["content-type"] == media


def test_the_binary_plan_is_not_served(http: httpx.Client) -> None:
    answer = http.get(f"/api/runs/{NS_A}/{OLD_PLAN}/plan", params={"format": "bin"})
    assert answer.status_code == 400 and "'format'" in answer.json()["error"]


def test_the_masked_json_is_the_plan_models_document(http: httpx.Client) -> None:
    answer = http.get(f"/api/runs/{NS_A}/{OLD_PLAN}/plan", params={"format": "masked-json"})
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    document = answer.json()
    assert [rc["address"] for rc in document["resource_changes"]] == ["null_resource.a"]
    assert document["variables"] == {} and "prior_state" not in document and "configuration" not in document


@pytest.mark.parametrize("run", [(NS_A, NEW_APPLY), (NS_B, NETWORK_PLAN)])
def test_a_missing_plan_is_404(http: httpx.Client, run: tuple[str, str]) -> None:
    for fmt in ("pretty", "short", "masked-json"):
        answer = http.get(f"/api/runs/{run[0]}/{run[1]}/plan", params={"format": fmt})
        assert answer.status_code == 404
        assert answer.json() == {"error": f"no {fmt} plan for TerraformRun {run[0]}/{run[1]}"}


# -- sync ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("identity", ["person"])
def test_sync_sets_sync_now_on_the_layer(platform: RestPlatform, identity: str) -> None:
    before = utcnow().replace(microsecond=0)
    with platform.client(identity) as client:
        answer = client.post(f"/api/layers/{NS_B}/network/sync")
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["namespace"] == NS_B and body["name"] == "network"
    annotations = platform.layer(NS_B, "network")["metadata"]["annotations"]
    assert annotations[ann.SYNC_NOW] == body["syncNow"]
    assert before <= parse_time(body["syncNow"]) <= utcnow()  # type: ignore[operator]
    assert platform.layer(NS_A, "app")["metadata"]["annotations"].get(ann.SYNC_NOW) is None
    with platform.client(identity) as client:
        assert client.get(f"/api/layers/{NS_B}/network").json()["syncNow"] == body["syncNow"]


def test_a_runner_may_not_ask_for_a_sync(platform: RestPlatform) -> None:
    before = platform.layer(NS_A, "app")
    platform.api.clear_requests()
    with platform.client("runner") as client:
        answer = client.post(f"/api/layers/{NS_A}/app/sync")
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"] == (
        f"system:serviceaccount:{NS_A}:burrito-py-runner is a runner; runner identities may not use the server's "
        "REST API or UI (their own artifacts are in the datastore)"
    )
    after = platform.layer(NS_A, "app")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert (after["metadata"].get("annotations") or {}).get(ann.SYNC_NOW) is None
    assert _patches(platform) == []


def test_sync_of_a_missing_layer_is_404_and_creates_nothing(platform: RestPlatform, http: httpx.Client) -> None:
    answer = http.post(f"/api/layers/{NS_A}/missing/sync")
    assert answer.status_code == 404
    assert answer.json() == {"error": f"TerraformLayer {NS_A}/missing not found"}
    assert platform.api.get_object(ann.API_VERSION, "terraformlayers", NS_A, "missing") is None


# -- validation -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("route", "parameter"), [
    ("/api/layers?namespace=Team_A", "query parameter 'namespace'"),
    (f"/api/layers?namespace={'a' * 64}", "query parameter 'namespace'"),
    ("/api/layers/Team_A/app", "path parameter 'ns'"),
    (f"/api/layers/{NS_A}/a..b", "path parameter 'name'"),
    (f"/api/layers/{NS_A}/-app-/runs", "path parameter 'name'"),
    (f"/api/runs/{NS_A}/UPPER", "path parameter 'run'"),
    (f"/api/runs/{NS_A}/{OLD_PLAN}/attempts/0/logs", "path parameter 'n'"),
    (f"/api/runs/{NS_A}/{OLD_PLAN}/attempts/one/logs", "path parameter 'n'"),
    (f"/api/runs/{NS_A}/{OLD_PLAN}/attempts/1000001/logs", "path parameter 'n'"),
    (f"/api/runs/{NS_A}/{OLD_PLAN}/plan?format=yaml", "query parameter 'format'"),
    ("POST /api/layers/a_b/app/sync", "path parameter 'ns'"),
])
def test_invalid_parameters_are_400_naming_the_parameter(http: httpx.Client, route: str, parameter: str) -> None:
    method, _, url = route.rpartition(" ")
    answer = http.request(method or "GET", url)
    assert answer.status_code == 400, answer.text
    assert parameter in answer.json()["error"]


# -- references written by whoever may create runs and layers ---------------------------------------------------
SECRET_OUTPUTS = b'{"db_password": {"value": "s3cret", "sensitive": true}}'


@pytest.mark.parametrize("layer_namespace", [
    # Each would turn the datastore path of this run's logs or plan into that of app's apply outputs, read with
    # the server's admin token: `#` and `?` cut the rest of the path off, `..` climbs out of it.
    f"{NS_A}/app/runs/{NEW_APPLY}/attempts/1/outputs#",
    f"{NS_A}/app/runs/{NEW_APPLY}/attempts/1/outputs?",
    f"../layers/{NS_A}/app/runs/{NEW_APPLY}/attempts/1/outputs#",
    "Team-A",
    f"{NS_A}\n",
])
def test_a_run_naming_an_invalid_layer_namespace_has_no_artifacts(
    platform: RestPlatform, layer_namespace: str
) -> None:
    with DatastoreClient(platform.datastore_url, token=platform.tokens["controller"]) as store:
        store.put_outputs(NS_A, "app", NEW_APPLY, 1, SECRET_OUTPUTS)
    body = run_body("crafted", "app", "plan", "abc123")
    body["spec"]["layer"]["namespace"] = layer_namespace
    create(platform.kube, "terraformruns", NS_B, body)
    try:
        with platform.client("person") as client:
            for route in (f"/api/runs/{NS_B}/crafted/attempts/1/logs", f"/api/runs/{NS_B}/crafted/plan"):
                answer = client.get(route)
                assert answer.status_code == 404, (route, answer.text)
                assert answer.json() == {
                    "error": f"TerraformRun {NS_B}/crafted names no valid layer, so it has no plans or logs"
                }
    finally:
        platform.kube.delete(f"/apis/{ann.API_VERSION}/namespaces/{NS_B}/terraformruns/crafted").raise_for_status()


def test_a_layer_naming_an_invalid_repository_namespace_is_refused_when_written(platform: RestPlatform) -> None:
    """A repository namespace that is a path (which the server once had to show as no repository, never reading
    it) is refused by the CRD when the layer is written: each reference is a namespace name (api/common.py)."""
    body = {"apiVersion": ann.API_VERSION, "kind": "TerraformLayer", "metadata": {"name": "crafted", "namespace": NS_B},
            "spec": {"repository": {"name": "x", "namespace": f"{NS_A}/terraformrepositories/infra#"},
                     "branch": "main", "path": "x"}}
    answer = platform.kube.post(f"/apis/{ann.API_VERSION}/namespaces/{NS_B}/terraformlayers", json=body)
    assert answer.status_code == 422, answer.text
    assert "spec.repository.namespace" in answer.text, answer.text


# -- a server limited to some namespaces -------------------------------------------------------------------------
def test_a_server_limited_to_namespaces_shows_and_syncs_only_their_layers_and_runs(platform: RestPlatform) -> None:
    assert platform.settings is not None
    settings = platform.settings.model_copy(update={"port": free_port(), "namespaces": [NS_B]})
    with running_server(settings) as url, httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {platform.tokens['person']}"}, timeout=30
    ) as client:
        platform.api.clear_requests()
        layers = client.get("/api/layers").json()
        assert [(item["namespace"], item["name"]) for item in layers] == [(NS_B, "network")]
        # Its repository is in team-a, which this server does not read.
        assert layers[0]["repository"] == {"namespace": NS_A, "name": "infra", "url": None, "state": None}
        assert client.get("/api/layers", params={"namespace": NS_A}).json() == []
        assert client.get(f"/api/layers/{NS_B}/network").json()["repository"]["url"] is None
        assert [run["name"] for run in client.get(f"/api/layers/{NS_B}/network/runs").json()] == [NETWORK_PLAN]
        assert client.get(f"/api/runs/{NS_B}/{NETWORK_PLAN}/attempts/1/logs").content == NETWORK_LOG
        for route, message in (
            (f"/api/layers/{NS_A}/app", f"TerraformLayer {NS_A}/app not found"),
            (f"/api/layers/{NS_A}/app/runs", f"TerraformLayer {NS_A}/app not found"),
            (f"/api/runs/{NS_A}/{OLD_PLAN}", f"TerraformRun {NS_A}/{OLD_PLAN} not found"),
            (f"/api/runs/{NS_A}/{OLD_PLAN}/plan", f"TerraformRun {NS_A}/{OLD_PLAN} not found"),
            (f"/api/runs/{NS_A}/{OLD_PLAN}/attempts/1/logs", f"TerraformRun {NS_A}/{OLD_PLAN} not found"),
            (f"POST /api/layers/{NS_A}/app/sync", f"TerraformLayer {NS_A}/app not found"),
        ):
            method, _, path = route.rpartition(" ")
            answer = client.request(method or "GET", path)
            assert answer.status_code == 404 and answer.json() == {"error": message}, (route, answer.text)
        # team-b's stray run names team-b/app (no such layer in a managed namespace): no plan, and nothing else.
        assert client.get(f"/api/runs/{NS_B}/{STRAY}/plan").status_code == 404
        # Nothing was read or written outside team-b: a Role there is all such a server needs.
        touched = [r.path for r in list(platform.api.requests) if "/terraform" in r.path]
        assert touched and all(f"/namespaces/{NS_B}/" in p for p in touched), touched
    assert (platform.layer(NS_A, "app")["metadata"].get("annotations") or {}).get(ann.SYNC_NOW) is None


# -- OpenAPI ---------------------------------------------------------------------------------------------------
def test_openapi_lists_every_route(platform: RestPlatform) -> None:
    with platform.client(None) as anonymous:
        answer = anonymous.get("/openapi.json")
    assert answer.status_code == 200
    schema = answer.json()
    routes = {(method.upper(), url) for url, item in schema["paths"].items() for method in item}
    assert routes >= {
        ("GET", "/api/layers"),
        ("GET", "/api/layers/{ns}/{name}"),
        ("GET", "/api/layers/{ns}/{name}/runs"),
        ("POST", "/api/layers/{ns}/{name}/sync"),
        ("GET", "/api/runs/{ns}/{run}"),
        ("GET", "/api/runs/{ns}/{run}/attempts/{n}/logs"),
        ("GET", "/api/runs/{ns}/{run}/plan"),
        ("POST", "/api/webhook"),
    }
    assert "serviceAccountToken" in schema["components"]["securitySchemes"]
    for url, item in schema["paths"].items():
        for method, operation in item.items():
            if url.startswith(("/api/layers", "/api/runs")):
                assert operation["security"] == [{"serviceAccountToken": []}], (method, url)
                assert "401" in operation["responses"] and "400" in operation["responses"], (method, url)
                assert "422" not in operation["responses"], (method, url)
    assert "403" in schema["paths"]["/api/layers/{ns}/{name}/sync"]["post"]["responses"]


# -- failures upstream ---------------------------------------------------------------------------------------
def test_a_failing_kubernetes_api_is_502_naming_it(platform: RestPlatform, http: httpx.Client) -> None:
    platform.api.inject_fault("GET", r"/terraformlayers$", 500)
    answer = http.get("/api/layers")
    assert answer.status_code == 502, answer.text
    assert answer.json()["error"].startswith("the Kubernetes API answered 500")
    assert http.get("/api/layers").status_code == 200


def test_a_token_that_cannot_be_reviewed_now_is_503(platform: RestPlatform) -> None:
    fresh = request_token(platform.kube, NS_A, "someone", [AUDIENCE])  # not in the server's token cache
    platform.api.inject_fault("POST", r"/tokenreviews$", 500)
    with httpx.Client(base_url=platform.server_url, headers={"Authorization": f"Bearer {fresh}"}) as client:
        answer = client.get("/api/layers")
        assert answer.status_code == 503, answer.text
        # Not remembered: once the API answers again, the same token works.
        assert client.get("/api/layers").status_code == 200
    assert answer.json()["error"].startswith("cannot check the token now") and fresh not in answer.text


def test_an_unreachable_datastore_is_503(platform: RestPlatform) -> None:
    assert platform.settings is not None
    settings = platform.settings.model_copy(update={"port": free_port(), "datastore_url": "http://127.0.0.1:9"})
    with running_server(settings) as url, httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {platform.tokens['person']}"}, timeout=30
    ) as client:
        for route in (f"/api/runs/{NS_A}/{OLD_PLAN}/plan", f"/api/runs/{NS_A}/{OLD_PLAN}/attempts/1/logs"):
            answer = client.get(route)
            assert answer.status_code == 503, answer.text
            assert answer.json() == {"error": "the datastore is unavailable"}
        assert client.get(f"/api/runs/{NS_A}/{OLD_PLAN}").status_code == 200  # the Kubernetes side still answers
