"""The API emulator behaves like kube-apiserver where kopf, the clients and kubectl depend on it.
One test per behaviour of KUBE-API-FIDELITY.md, over real HTTP."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier

from burrito_py.api.crdgen import generate_crds

TFL = "/apis/terraform.burrito-py.io/v1alpha1/namespaces/default/terraformlayers"
CM = "/api/v1/namespaces/default/configmaps"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[ApiServer, httpx.Client]]:
    server = ApiServer(pod_log_dir=tmp_path / "logs").start()
    applier = Applier(server.url)
    for crd in generate_crds().values():
        applier.apply(crd)
    applier.close()
    with httpx.Client(base_url=server.url, timeout=10, headers=server.admin_headers) as http:
        yield server, http
    server.stop()


def layer(name: str = "app", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "terraform.burrito-py.io/v1alpha1", "kind": "TerraformLayer", "metadata": {"name": name},
            "spec": {"repository": {"name": "repo"}, "branch": "main", "path": "layers/app", **spec}}


def cm(name: str, labels: dict[str, str] | None = None, data: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels or {}},
            "data": data or {}}


def test_discovery_serves_versions_groups_and_resources(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    assert http.get("/version").json()["major"] == "1"
    assert http.get("/api").json()["versions"] == ["v1"]
    groups = {g["name"] for g in http.get("/apis").json()["groups"]}
    assert {"terraform.burrito-py.io", "coordination.k8s.io", "apiextensions.k8s.io"} <= groups
    resources = {r["name"]: r for r in http.get("/apis/terraform.burrito-py.io/v1alpha1").json()["resources"]}
    assert resources["terraformlayers"]["shortNames"] == ["tfl", "layer"]
    assert "terraformlayers/status" in resources
    assert "pods/log" in {r["name"] for r in http.get("/api/v1").json()["resources"]}
    for probe in ("/healthz", "/readyz", "/livez"):
        assert http.get(probe).status_code == 200


def test_create_fills_metadata_honours_generate_name_and_refuses_duplicates(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    created = http.post(CM, json={"metadata": {"generateName": "x-"}})
    assert created.status_code == 201
    meta = created.json()["metadata"]
    assert meta["name"].startswith("x-") and meta["uid"] and meta["resourceVersion"] and meta["creationTimestamp"]
    assert meta["namespace"] == "default"
    assert http.post(CM, json=cm("a")).status_code == 201
    dup = http.post(CM, json=cm("a"))
    assert dup.status_code == 409 and dup.json()["reason"] == "AlreadyExists"
    assert http.post("/api/v1/namespaces/nope/configmaps", json=cm("b")).status_code == 404
    other = {**cm("c"), "metadata": {"name": "c", "namespace": "kube-system"}}
    assert http.post(CM, json=other).status_code == 400


def test_resource_version_bumps_on_change_not_on_noop_and_generation_on_spec(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    body = http.post(TFL, json=layer()).json()
    assert body["metadata"]["generation"] == 1
    same = http.patch(f"{TFL}/app", json={"spec": {"branch": "main"}}, headers=MERGE).json()
    assert same["metadata"]["resourceVersion"] == body["metadata"]["resourceVersion"]
    labelled = http.patch(f"{TFL}/app", json={"metadata": {"labels": {"a": "b"}}}, headers=MERGE).json()
    assert int(labelled["metadata"]["resourceVersion"]) > int(body["metadata"]["resourceVersion"])
    assert labelled["metadata"]["generation"] == 1
    changed = http.patch(f"{TFL}/app", json={"spec": {"branch": "dev"}}, headers=MERGE).json()
    assert changed["metadata"]["generation"] == 2


def test_put_with_a_stale_resource_version_conflicts(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    body = http.post(CM, json=cm("a")).json()
    http.patch(f"{CM}/a", json={"data": {"k": "v"}}, headers=MERGE)
    stale = http.put(f"{CM}/a", json=body)
    assert stale.status_code == 409 and stale.json()["reason"] == "Conflict"


def test_patch_types(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    http.post(CM, json=cm("a", data={"x": "1", "y": "2"}))
    merged = http.patch(f"{CM}/a", json={"data": {"x": None, "z": "3"}}, headers=MERGE).json()
    assert merged["data"] == {"y": "2", "z": "3"}
    ops = [{"op": "test", "path": "/data/y", "value": "nope"}]
    failed = http.patch(f"{CM}/a", json=ops, headers=JSON_PATCH)
    assert failed.status_code == 422
    assert http.patch(f"{CM}/a", json={"not": "a list"}, headers=JSON_PATCH).status_code == 400  # as DecodePatch
    assert http.patch(f"{CM}/a", content=b"{}", headers={"Content-Type": "text/plain"}).status_code == 415
    rv = merged["metadata"]["resourceVersion"]
    http.patch(f"{CM}/a", json={"data": {"w": "4"}}, headers=MERGE)
    stale = http.patch(f"{CM}/a", json={"metadata": {"resourceVersion": rv}, "data": {"q": "1"}}, headers=MERGE)
    assert stale.status_code == 409


def test_strategic_merge_merges_containers_by_name(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    pods = "/api/v1/namespaces/default/pods"
    http.post(pods, json={"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}})
    patched = http.patch(f"{pods}/p", json={"spec": {"containers": [{"name": "b", "image": "b:2"}]}},
                         headers={"Content-Type": "application/strategic-merge-patch+json"}).json()
    assert [(c["name"], c["image"]) for c in patched["spec"]["containers"]] == [("a", "a:1"), ("b", "b:2")]


def test_apply_patch_creates_or_merges(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    headers = {"Content-Type": "application/apply-patch+yaml"}
    created = http.patch(f"{CM}/applied?fieldManager=t", content=json.dumps(cm("applied", data={"a": "1"})),
                         headers=headers)
    assert created.status_code == 201
    merged = http.patch(f"{CM}/applied?fieldManager=t", content=json.dumps(cm("applied", data={"b": "2"})),
                        headers=headers)
    assert merged.json()["data"] == {"a": "1", "b": "2"}


def test_status_subresource_splits_writes(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    http.post(TFL, json={**layer(), "status": {"state": "Idle"}})
    assert "status" not in http.get(f"{TFL}/app").json() or not http.get(f"{TFL}/app").json()["status"]
    http.patch(f"{TFL}/app", json={"status": {"state": "Idle"}}, headers=MERGE)
    assert not (http.get(f"{TFL}/app").json().get("status") or {}).get("state")
    both = http.patch(f"{TFL}/app/status", json={"status": {"state": "Running"}, "spec": {"branch": "x"}},
                      headers=MERGE).json()
    assert both["status"]["state"] == "Running" and both["spec"]["branch"] == "main"


def test_finalizers_delay_deletion_and_refuse_new_ones(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    http.post(CM, json={**cm("f"), "metadata": {"name": "f", "finalizers": ["x/y"]}})
    assert http.delete(f"{CM}/f").status_code == 200
    pending = http.get(f"{CM}/f").json()
    assert pending["metadata"]["deletionTimestamp"]
    refused = http.patch(f"{CM}/f", json={"metadata": {"finalizers": ["x/y", "new/one"]}}, headers=MERGE)
    assert refused.status_code == 422
    http.patch(f"{CM}/f", json={"metadata": {"finalizers": None}}, headers=MERGE)
    assert http.get(f"{CM}/f").status_code == 404


def test_delete_preconditions_and_owner_garbage_collection(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    owner = http.post(CM, json=cm("owner")).json()
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    http.post(CM, json={**cm("child"), "metadata": {"name": "child", "ownerReferences": [ref]}})
    bad = http.request("DELETE", f"{CM}/owner", json={"preconditions": {"resourceVersion": "1"}})
    assert bad.status_code == 409
    assert http.request("DELETE", f"{CM}/owner", json={"propagationPolicy": "Background"}).status_code == 200
    assert http.get(f"{CM}/child").status_code == 404


def test_delete_collection_with_a_label_selector(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    for name, team in (("a", "x"), ("b", "x"), ("c", "y")):
        http.post(CM, json=cm(name, {"team": team}))
    http.delete(CM, params={"labelSelector": "team=x"})
    assert [i["metadata"]["name"] for i in http.get(CM).json()["items"]] == ["c"]


def test_dry_run_validates_without_storing(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    assert http.post(f"{CM}?dryRun=All", json=cm("dry")).status_code == 201
    assert http.get(f"{CM}/dry").status_code == 404


def test_custom_resources_are_validated_naming_the_field(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    bad = http.post(TFL, json=layer(path="../escape", remediationStrategy={"onError": {"maxRetries": -1}}))
    assert bad.status_code == 422 and bad.json()["reason"] == "Invalid"
    fields = {c["field"] for c in bad.json()["details"]["causes"]}
    assert {"spec.path", "spec.remediationStrategy.onError.maxRetries"} <= fields
    missing = http.post(TFL, json={**layer(), "spec": {"repository": {"name": "r"}, "path": "a"}})
    assert "spec.branch" in missing.json()["message"]
    pruned = http.post(TFL, json=layer(name="p", unknownField=1)).json()
    assert "unknownField" not in pruned["spec"]


def test_errors_are_status_bodies(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    missing = http.get(f"{CM}/nope").json()
    assert (missing["kind"], missing["reason"], missing["code"]) == ("Status", "NotFound", 404)
    assert http.get("/apis/nope.io/v1/things").status_code == 404
    malformed = http.post(CM, content=b"{not json", headers={"Content-Type": "application/json"})
    assert malformed.status_code == 400 and malformed.json()["reason"] == "BadRequest"
    assert http.request("PUT", CM, json={}).status_code == 405


def test_lists_selectors_and_pagination(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    for name, labels in (("a", {"team": "x", "tier": "1"}), ("b", {"team": "y"}), ("c", {})):
        http.post(CM, json=cm(name, labels))
    listing = http.get(CM).json()
    assert listing["kind"] == "ConfigMapList" and listing["metadata"]["resourceVersion"].isdigit()

    def names(**params: str) -> list[str]:
        return [i["metadata"]["name"] for i in http.get(CM, params=params).json()["items"]]

    assert names(labelSelector="team=x") == ["a"]
    assert names(labelSelector="team!=x") == ["b", "c"]
    assert names(labelSelector="team in (x,y)") == ["a", "b"]
    assert names(labelSelector="team notin (x)") == ["b", "c"]
    assert names(labelSelector="tier") == ["a"]
    assert names(labelSelector="!team") == ["c"]
    assert names(fieldSelector="metadata.name=b") == ["b"]
    page = http.get(CM, params={"limit": "2"}).json()
    assert len(page["items"]) == 2 and page["metadata"]["continue"]
    rest = http.get(CM, params={"limit": "2", "continue": page["metadata"]["continue"]}).json()
    assert [i["metadata"]["name"] for i in rest["items"]] == ["c"]


def _watch(server: ApiServer, params: dict[str, str], count: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with httpx.stream("GET", server.url + CM, params={"watch": "true", **params}, timeout=10,
                      headers=server.admin_headers) as response:
        for line in response.iter_lines():
            if line:
                events.append(json.loads(line))
            if len(events) >= count:
                break
    return events


def test_watch_lists_then_streams_and_resumes(api: tuple[ApiServer, httpx.Client]):
    server, http = api
    first = http.post(CM, json=cm("a")).json()
    assert [e["type"] for e in _watch(server, {}, 1)] == ["ADDED"]
    http.patch(f"{CM}/a", json={"data": {"k": "v"}}, headers=MERGE)
    resumed = _watch(server, {"resourceVersion": first["metadata"]["resourceVersion"]}, 1)
    assert resumed[0]["type"] == "MODIFIED"
    got: list[dict[str, Any]] = []
    thread = threading.Thread(target=lambda: got.extend(_watch(server, {"resourceVersion": "0"}, 2)))
    thread.start()
    server_rv = http.get(CM).json()["metadata"]["resourceVersion"]
    assert server_rv
    import time

    deadline = time.monotonic() + 5
    while not any(r.query.get("watch") for r in server.requests) and time.monotonic() < deadline:
        time.sleep(0.01)
    http.post(CM, json=cm("b"))
    thread.join(10)
    assert [e["type"] for e in got] == ["ADDED", "ADDED"]


def test_watch_of_a_trimmed_version_is_expired():
    with ApiServer(event_log_size=3) as server, \
            httpx.Client(base_url=server.url, timeout=10, headers=server.admin_headers) as http:
        for i in range(5):
            http.post(CM, json=cm(f"n{i}"))
        event = _watch(server, {"resourceVersion": "1"}, 1)[0]
        assert event["type"] == "ERROR" and event["object"]["code"] == 410


def test_watch_timeout_ends_the_stream(api: tuple[ApiServer, httpx.Client]):
    server, _ = api
    with httpx.stream("GET", server.url + CM, params={"watch": "1", "timeoutSeconds": "1"}, timeout=10,
                      headers=server.admin_headers) as r:
        assert list(r.iter_lines()) == []
        assert r.status_code == 200


def test_selector_watches_see_objects_enter_and_leave(api: tuple[ApiServer, httpx.Client]):
    server, http = api
    http.post(CM, json=cm("a"))
    rv = http.get(CM).json()["metadata"]["resourceVersion"]
    http.patch(f"{CM}/a", json={"metadata": {"labels": {"team": "x"}}}, headers=MERGE)
    http.patch(f"{CM}/a", json={"metadata": {"labels": {"team": "y"}}}, headers=MERGE)
    events = _watch(server, {"resourceVersion": rv, "labelSelector": "team=x"}, 2)
    assert [e["type"] for e in events] == ["ADDED", "DELETED"]


def test_crds_register_and_unregister(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    crd = http.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/terraformruns.terraform.burrito-py.io")
    conditions = {c["type"]: c["status"] for c in crd.json()["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert crd.json()["spec"]["versions"][0]["additionalPrinterColumns"]
    http.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/terraformruns.terraform.burrito-py.io")
    names = {r["name"] for r in http.get("/apis/terraform.burrito-py.io/v1alpha1").json()["resources"]}
    assert "terraformruns" not in names and "terraformlayers" in names


def test_token_request_and_review(api: tuple[ApiServer, httpx.Client]):
    _, http = api
    pod = http.post("/api/v1/namespaces/default/pods", json={"metadata": {"name": "p"},
                                                             "spec": {"containers": [{"name": "c"}]}}).json()
    issued = http.post("/api/v1/namespaces/default/serviceaccounts/default/token", json={"spec": {
        "audiences": ["burrito-py"], "expirationSeconds": 600,
        "boundObjectRef": {"kind": "Pod", "name": "p", "uid": pod["metadata"]["uid"]}}})
    assert issued.status_code == 201
    token = issued.json()["status"]["token"]

    def review(tok: str, audiences: list[str]) -> dict[str, Any]:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": tok, "audiences": audiences}}
        return http.post("/apis/authentication.k8s.io/v1/tokenreviews", json=body).json()["status"]

    ok = review(token, ["burrito-py"])
    assert ok["authenticated"] and ok["user"]["username"] == "system:serviceaccount:default:default"
    assert ok["user"]["extra"]["authentication.kubernetes.io/pod-name"] == ["p"]
    assert not review(token, ["other"])["authenticated"]
    assert not review(token[:-2] + "xx", ["burrito-py"])["authenticated"]
    http.delete("/api/v1/namespaces/default/pods/p")
    assert not review(token, ["burrito-py"])["authenticated"], "a token bound to a deleted pod is dead"
    assert http.post("/api/v1/namespaces/default/serviceaccounts/nobody/token", json={}).status_code == 404


def test_pod_logs_are_served_from_the_node_log_dir(api: tuple[ApiServer, httpx.Client], tmp_path: Path):
    _, http = api
    http.post("/api/v1/namespaces/default/pods", json={"metadata": {"name": "p"},
                                                      "spec": {"containers": [{"name": "c"}]}})
    log = tmp_path / "logs/default/p/c.log"
    log.parent.mkdir(parents=True)
    log.write_text("one\ntwo\nthree\n")
    assert http.get("/api/v1/namespaces/default/pods/p/log").text == "one\ntwo\nthree\n"
    assert http.get("/api/v1/namespaces/default/pods/p/log", params={"tailLines": "1"}).text == "three\n"
    assert http.get("/api/v1/namespaces/default/pods/nope/log").status_code == 404


def test_request_log_and_fault_injection(api: tuple[ApiServer, httpx.Client]):
    server, http = api
    server.clear_requests()
    server.inject_fault("GET", r"/configmaps$", status=500, times=1)
    assert http.get(CM).status_code == 500
    assert http.get(CM).status_code == 200
    assert [(r.method, r.path) for r in server.requests] == [("GET", CM), ("GET", CM)]


def test_fault_after_the_write_loses_only_the_response(api: tuple[ApiServer, httpx.Client]):
    server, http = api
    server.inject_fault("POST", r"/configmaps$", status=500, after=True)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "lost-reply"}, "data": {"a": "1"}}
    assert http.post(CM, json=body).status_code == 500
    assert http.get(f"{CM}/lost-reply").json()["data"] == {"a": "1"}  # the write happened
    assert http.post(CM, json=body).status_code == 409


def test_kubectl_works_and_shows_printer_columns(api: tuple[ApiServer, httpx.Client], tmp_path: Path):
    server, _ = api
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    manifest = tmp_path / "layer.yaml"
    manifest.write_text(json.dumps(layer()))
    kubectl = ["kubectl", "--kubeconfig", str(kubeconfig)]
    subprocess.run([*kubectl, "apply", "--validate=false", "-f", str(manifest)], check=True, capture_output=True)
    subprocess.run([*kubectl, "patch", "tfl", "app", "--subresource=status", "--type=merge",
                    "-p", '{"status":{"state":"Idle"}}'], check=True, capture_output=True)
    out = subprocess.run([*kubectl, "get", "tfl,tfrun,tfr"], check=True, capture_output=True, text=True).stdout
    assert "STATE" in out and "REPOSITORY" in out and "Idle" in out and "layers/app" in out
