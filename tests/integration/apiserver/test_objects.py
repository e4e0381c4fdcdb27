"""KUBE-API-FIDELITY.md § Objects: create, resourceVersion, generation, replace, patches, the status
subresource, deletion (finalizers, preconditions, garbage collection, collections), dryRun, CRD schemas
and error Status bodies."""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import httpx
import pytest
from burrito_local.apiserver import ApiServer
from kubernetes import client

from tests.integration.apiserver.conftest import CMS, JSON_PATCH, MERGE, STRATEGIC, cm, stream_lines, widget
from tests.support.emulator import wait_for

PODS = "/api/v1/namespaces/default/pods"


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec}}


def owner_ref(obj: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], **extra}


# -- create ----------------------------------------------------------------------------------------
def test_create_fills_uid_resource_version_creation_timestamp_generation_and_namespace(kube: Any) -> None:
    created = client.CoreV1Api(kube).create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    meta = created.metadata
    assert re.fullmatch(r"[0-9a-f-]{36}", meta.uid)
    assert meta.resource_version.isdigit() and meta.generation == 1
    assert meta.creation_timestamp is not None and meta.namespace == "default"


def test_create_honours_generate_name_and_answers_201(http: httpx.Client) -> None:
    response = http.post(CMS, json={"metadata": {"generateName": "run-"}})
    assert response.status_code == 201
    name = response.json()["metadata"]["name"]
    assert re.fullmatch(r"run-[a-z0-9]{5}", name)
    assert http.get(f"{CMS}/{name}").status_code == 200


def test_create_of_a_duplicate_is_409_already_exists(kube: Any) -> None:
    api = client.CoreV1Api(kube)
    api.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    with pytest.raises(client.ApiException) as caught:
        api.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    body = json.loads(caught.value.body)
    assert caught.value.status == 409 and body["reason"] == "AlreadyExists"
    assert body["message"] == 'configmaps "a" already exists'


def test_create_in_a_missing_namespace_is_404(http: httpx.Client) -> None:
    response = http.post("/api/v1/namespaces/nope/configmaps", json=cm("a"))
    assert response.status_code == 404 and response.json()["message"] == 'namespaces "nope" not found'


def test_create_with_body_and_url_namespaces_disagreeing_is_400(http: httpx.Client) -> None:
    body = {"metadata": {"name": "a", "namespace": "kube-system"}}
    response = http.post(CMS, json=body)
    assert response.status_code == 400 and response.json()["reason"] == "BadRequest"


# -- resourceVersion and generation ---------------------------------------------------------------
def test_one_global_resource_version_increases_on_every_change(http: httpx.Client, widgets: str) -> None:
    seen = [int(http.post(CMS, json=cm("a")).json()["metadata"]["resourceVersion"])]
    seen.append(int(http.post(widgets, json=widget()).json()["metadata"]["resourceVersion"]))
    seen.append(int(http.patch(f"{CMS}/a", json={"data": {"k": "v"}}, headers=MERGE).json()["metadata"][
        "resourceVersion"]))
    seen.append(int(http.patch(f"{widgets}/w/status", json={"status": {"state": "x"}}, headers=MERGE).json()[
        "metadata"]["resourceVersion"]))
    listed = int(http.get(CMS).json()["metadata"]["resourceVersion"])
    assert seen == sorted(set(seen)) and listed == seen[-1]


def test_noop_patch_keeps_resource_version_and_emits_no_watch_event(apiserver: ApiServer, http: httpx.Client) -> None:
    rv = http.post(CMS, json=cm("a", k="v")).json()["metadata"]["resourceVersion"]
    same = http.patch(f"{CMS}/a", json={"data": {"k": "v"}}, headers=MERGE).json()
    assert same["metadata"]["resourceVersion"] == rv
    replaced = http.put(f"{CMS}/a", json=same).json()
    assert replaced["metadata"]["resourceVersion"] == rv
    http.post(CMS, json=cm("b"))  # the next real change
    events = stream_lines(apiserver, CMS, {"watch": "true", "resourceVersion": rv}, 1)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b")]


def test_generation_bumps_only_when_something_outside_metadata_and_status_changes(
    http: httpx.Client, widgets: str
) -> None:
    http.post(widgets, json=widget())
    labelled = http.patch(f"{widgets}/w", json={"metadata": {"labels": {"a": "b"}}}, headers=MERGE).json()
    assert labelled["metadata"]["generation"] == 1
    status = http.patch(f"{widgets}/w/status", json={"status": {"state": "Ready"}}, headers=MERGE).json()
    assert status["metadata"]["generation"] == 1
    spec = http.patch(f"{widgets}/w", json={"spec": {"branch": "dev"}}, headers=MERGE).json()
    assert spec["metadata"]["generation"] == 2


# -- PUT and PATCH ---------------------------------------------------------------------------------
def test_put_with_a_stale_resource_version_is_409_conflict(kube: Any) -> None:
    api = client.CoreV1Api(kube)
    first = api.create_namespaced_config_map("default", {"metadata": {"name": "a"}, "data": {"k": "1"}})
    stale = first.metadata.resource_version
    api.replace_namespaced_config_map("a", "default", {"metadata": {"name": "a", "resourceVersion": stale},
                                                       "data": {"k": "2"}})
    with pytest.raises(client.ApiException) as caught:
        api.replace_namespaced_config_map("a", "default", {"metadata": {"name": "a", "resourceVersion": stale},
                                                           "data": {"k": "3"}})
    assert caught.value.status == 409 and json.loads(caught.value.body)["reason"] == "Conflict"
    assert api.read_namespaced_config_map("a", "default").data == {"k": "2"}


def test_merge_patch_null_deletes_and_a_body_resource_version_is_a_precondition(http: httpx.Client) -> None:
    rv = http.post(CMS, json=cm("a", x="1", y="2")).json()["metadata"]["resourceVersion"]
    merged = http.patch(f"{CMS}/a", json={"data": {"x": None, "z": "3"}}, headers=MERGE).json()
    assert merged["data"] == {"y": "2", "z": "3"}
    stale = http.patch(f"{CMS}/a", json={"metadata": {"resourceVersion": rv}, "data": {"q": "1"}}, headers=MERGE)
    assert stale.status_code == 409 and stale.json()["reason"] == "Conflict"
    fresh = merged["metadata"]["resourceVersion"]
    ok = http.patch(f"{CMS}/a", json={"metadata": {"resourceVersion": fresh}, "data": {"q": "1"}}, headers=MERGE)
    assert ok.status_code == 200 and ok.json()["data"]["q"] == "1"


def test_json_patch_applies_and_a_failed_test_is_422_and_a_non_list_is_400(http: httpx.Client) -> None:
    created = http.post(CMS, json=cm("a", x="1")).json()
    rv = created["metadata"]["resourceVersion"]
    ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
           {"op": "add", "path": "/metadata/finalizers", "value": ["x/y"]}]
    patched = http.patch(f"{CMS}/a", json=ops, headers=JSON_PATCH)
    assert patched.status_code == 200 and patched.json()["metadata"]["finalizers"] == ["x/y"]
    again = http.patch(f"{CMS}/a", json=ops, headers=JSON_PATCH)  # rv moved on: the test op fails
    assert again.status_code == 422 and again.json()["reason"] == "Invalid"
    assert http.patch(f"{CMS}/a", json={"op": "add"}, headers=JSON_PATCH).status_code == 400
    missing = http.patch(f"{CMS}/a", json=[{"op": "remove", "path": "/data/nope"}], headers=JSON_PATCH)
    assert missing.status_code == 422


def test_strategic_merge_patch_merges_builtin_lists_by_key(apiserver: ApiServer, http: httpx.Client) -> None:
    spec = {"containers": [{"name": "a", "image": "x", "env": [{"name": "A", "value": "1"}],
                            "ports": [{"containerPort": 80}], "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
            "volumes": [{"name": "v", "emptyDir": {}}]}
    http.post(PODS, json=pod("p", **spec))
    patch = {"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u1"}]},
             "spec": {"containers": [{"name": "a", "env": [{"name": "B", "value": "2"}],
                                      "ports": [{"containerPort": 81}]},
                                     {"name": "b", "image": "y"}],
                      "volumes": [{"name": "w", "emptyDir": {}}]}}
    merged = http.patch(f"{PODS}/p", json=patch, headers=STRATEGIC).json()
    containers = {c["name"]: c for c in merged["spec"]["containers"]}
    assert containers["a"]["image"] == "x"
    assert [e["name"] for e in containers["a"]["env"]] == ["A", "B"]
    assert [p["containerPort"] for p in containers["a"]["ports"]] == [80, 81]
    assert containers["a"]["volumeMounts"] == [{"name": "v", "mountPath": "/v"}] and "b" in containers
    assert [v["name"] for v in merged["spec"]["volumes"]] == ["v", "w"]
    second = {"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "p", "uid": "u2"}]}}
    owners = http.patch(f"{PODS}/p", json=second, headers=STRATEGIC).json()["metadata"]["ownerReferences"]
    assert [o["uid"] for o in owners] == ["u1", "u2"]
    deleted = {"spec": {"containers": [{"name": "b", "$patch": "delete"}]}}
    names = [c["name"] for c in http.patch(f"{PODS}/p", json=deleted, headers=STRATEGIC).json()["spec"]["containers"]]
    assert names == ["a"]


def test_apply_patch_creates_then_merges(http: httpx.Client) -> None:
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  x: '1'\n"
    headers = {"Content-Type": "application/apply-patch+yaml"}
    created = http.patch(f"{CMS}/a", params={"fieldManager": "test"}, content=manifest, headers=headers)
    assert created.status_code == 201 and created.json()["data"] == {"x": "1"}
    merged = http.patch(f"{CMS}/a", params={"fieldManager": "test"}, content=manifest.replace("x: '1'", "y: '2'"),
                        headers=headers)
    assert merged.status_code == 200 and merged.json()["data"] == {"x": "1", "y": "2"}
    assert http.patch(f"{CMS}/a", content=manifest, headers=headers).status_code == 400  # fieldManager required


def test_unsupported_patch_content_type_is_415(http: httpx.Client, widgets: str) -> None:
    http.post(CMS, json=cm("a"))
    response = http.patch(f"{CMS}/a", content=b"{}", headers={"Content-Type": "text/plain"})
    assert response.status_code == 415 and response.json()["reason"] == "UnsupportedMediaType"
    http.post(widgets, json=widget())
    assert http.patch(f"{widgets}/w", json={"spec": {}}, headers=STRATEGIC).status_code == 415


# -- status subresource ----------------------------------------------------------------------------
def test_with_status_subresource_main_endpoint_ignores_status_and_status_endpoint_changes_only_status(
    http: httpx.Client, widgets: str
) -> None:
    created = http.post(widgets, json={**widget(), "status": {"state": "Forged"}}).json()
    assert "status" not in created
    main = http.patch(f"{widgets}/w", json={"status": {"state": "Forged"}, "spec": {"branch": "dev"}},
                      headers=MERGE).json()
    assert "status" not in main and main["spec"]["branch"] == "dev"
    status = http.patch(f"{widgets}/w/status", json={"status": {"state": "Ready"}, "spec": {"branch": "x"},
                                                     "metadata": {"labels": {"a": "b"}}}, headers=MERGE).json()
    assert status["status"] == {"state": "Ready"} and status["spec"]["branch"] == "dev"
    assert "labels" not in status["metadata"]
    put = http.put(f"{widgets}/w", json={**status, "status": {"state": "Forged"}}).json()
    assert put["status"] == {"state": "Ready"}
    assert http.get(f"{CMS.rsplit('/', 1)[0]}/configmaps/none/status").status_code == 404


# -- deletion ---------------------------------------------------------------------------------------
def test_delete_with_finalizers_sets_deletion_timestamp_until_they_are_removed(
    apiserver: ApiServer, http: httpx.Client
) -> None:
    http.post(CMS, json={"metadata": {"name": "f", "finalizers": ["example.com/hold"]}})
    first = http.delete(f"{CMS}/f")
    assert first.status_code == 200 and first.json()["metadata"]["deletionTimestamp"]
    assert http.delete(f"{CMS}/f").json()["metadata"]["deletionTimestamp"] == first.json()["metadata"][
        "deletionTimestamp"]
    assert http.get(f"{CMS}/f").status_code == 200
    done = http.patch(f"{CMS}/f", json={"metadata": {"finalizers": None}}, headers=MERGE)
    assert done.status_code == 200
    assert http.get(f"{CMS}/f").status_code == 404
    assert apiserver.get_object("v1", "configmaps", "default", "f") is None


def test_marking_an_object_for_deletion_bumps_its_generation_once(http: httpx.Client, widgets: str) -> None:
    created = http.post(widgets, json={"metadata": {"name": "g", "finalizers": ["example.com/hold"]},
                                       "spec": {"branch": "main"}}).json()
    assert created["metadata"]["generation"] == 1
    marked = http.delete(f"{widgets}/g").json()
    assert marked["metadata"]["deletionTimestamp"] and marked["metadata"]["generation"] == 2
    assert http.delete(f"{widgets}/g").json()["metadata"]["generation"] == 2  # already deleting: no bump
    assert http.get(f"{widgets}/g").json()["metadata"]["generation"] == 2


def test_new_finalizers_are_refused_with_422_while_deleting(http: httpx.Client) -> None:
    http.post(CMS, json={"metadata": {"name": "f", "finalizers": ["a/b"]}})
    http.delete(f"{CMS}/f")
    refused = http.patch(f"{CMS}/f", json={"metadata": {"finalizers": ["a/b", "c/d"]}}, headers=MERGE)
    assert refused.status_code == 422
    assert refused.json()["details"]["causes"][0]["field"] == "metadata.finalizers"


def test_delete_preconditions_are_checked(http: httpx.Client) -> None:
    created = http.post(CMS, json=cm("a")).json()
    wrong = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "not-the-uid"}}
    response = http.request("DELETE", f"{CMS}/a", json=wrong)
    assert response.status_code == 409 and response.json()["reason"] == "Conflict"
    stale = {"preconditions": {"resourceVersion": "1"}}
    assert http.request("DELETE", f"{CMS}/a", json=stale).status_code == 409
    right = {"preconditions": {"uid": created["metadata"]["uid"],
                               "resourceVersion": created["metadata"]["resourceVersion"]}}
    assert http.request("DELETE", f"{CMS}/a", json=right).status_code == 200


def test_background_propagation_garbage_collects_dependents_transitively(
    apiserver: ApiServer, http: httpx.Client
) -> None:
    # A cluster-scoped owner (a namespace-less CRD would do; a Namespace-owned chain of ConfigMaps here).
    root = http.post("/api/v1/namespaces", json={"metadata": {"name": "team"}}).json()
    owner = http.post("/apis/coordination.k8s.io/v1/namespaces/default/leases",
                      json={"metadata": {"name": "owner", "ownerReferences": [owner_ref(root)]}}).json()
    child = http.post(CMS, json={"metadata": {"name": "child", "ownerReferences": [owner_ref(owner)]}}).json()
    http.post(CMS, json={"metadata": {"name": "grandchild", "ownerReferences": [owner_ref(child)]}})
    shared = http.post(CMS, json={"metadata": {"name": "shared", "ownerReferences": [
        owner_ref(child), owner_ref(http.post(CMS, json=cm("other")).json())]}}).json()
    assert shared["metadata"]["name"] == "shared"
    http.request("DELETE", "/api/v1/namespaces/team", params={"propagationPolicy": "Background"})
    wait_for(lambda: apiserver.get_object("v1", "configmaps", "default", "grandchild") is None)
    assert apiserver.get_object("coordination.k8s.io/v1", "leases", "default", "owner") is None
    assert apiserver.get_object("v1", "configmaps", "default", "child") is None
    survivor = apiserver.get_object("v1", "configmaps", "default", "shared")
    assert survivor is not None and [o["name"] for o in survivor["metadata"]["ownerReferences"]] == ["other"]


def test_foreground_propagation_deletes_dependents_before_the_owner(apiserver: ApiServer, http: httpx.Client) -> None:
    owner = http.post(CMS, json=cm("owner")).json()
    http.post(CMS, json={"metadata": {"name": "held", "finalizers": ["x/y"],
                                      "ownerReferences": [owner_ref(owner, blockOwnerDeletion=True)]}})
    http.post(CMS, json={"metadata": {"name": "free", "ownerReferences": [owner_ref(owner)]}})
    response = http.request("DELETE", f"{CMS}/owner", json={"propagationPolicy": "Foreground"})
    assert response.status_code == 200
    waiting = http.get(f"{CMS}/owner").json()["metadata"]
    assert waiting["deletionTimestamp"] and "foregroundDeletion" in waiting["finalizers"]
    assert http.get(f"{CMS}/free").status_code == 404
    assert http.get(f"{CMS}/held").json()["metadata"]["deletionTimestamp"]
    http.patch(f"{CMS}/held", json={"metadata": {"finalizers": None}}, headers=MERGE)
    assert http.get(f"{CMS}/held").status_code == 404
    assert http.get(f"{CMS}/owner").status_code == 404


def test_orphan_propagation_keeps_dependents_without_the_owner_reference(http: httpx.Client) -> None:
    owner = http.post(CMS, json=cm("owner")).json()
    http.post(CMS, json={"metadata": {"name": "dep", "ownerReferences": [owner_ref(owner)]}})
    http.request("DELETE", f"{CMS}/owner", params={"propagationPolicy": "Orphan"})
    dep = http.get(f"{CMS}/dep").json()
    assert "ownerReferences" not in dep["metadata"]


def test_deleting_a_namespace_deletes_its_contents_then_the_namespace(
    apiserver: ApiServer, http: httpx.Client
) -> None:
    http.post("/api/v1/namespaces", json={"metadata": {"name": "team"}})
    assert http.get("/api/v1/namespaces/team/serviceaccounts/default").status_code == 200
    http.post("/api/v1/namespaces/team/configmaps", json={"metadata": {"name": "held", "finalizers": ["x/y"]}})
    http.post("/api/v1/namespaces/team/secrets", json={"metadata": {"name": "s"}, "stringData": {"a": "b"}})
    terminating = http.delete("/api/v1/namespaces/team").json()
    assert terminating["status"]["phase"] == "Terminating"
    assert http.get("/api/v1/namespaces/team/secrets/s").status_code == 404
    refused = http.post("/api/v1/namespaces/team/configmaps", json=cm("new"))
    assert refused.status_code == 403 and refused.json()["reason"] == "Forbidden"
    http.patch("/api/v1/namespaces/team/configmaps/held", json={"metadata": {"finalizers": None}}, headers=MERGE)
    assert http.get("/api/v1/namespaces/team").status_code == 404


def test_delete_collection_honours_label_selectors(http: httpx.Client) -> None:
    for name, app in (("a", "x"), ("b", "x"), ("c", "y")):
        http.post(CMS, json=cm(name, {"app": app}))
    deleted = http.delete(CMS, params={"labelSelector": "app=x"}).json()
    assert deleted["kind"] == "ConfigMapList" and sorted(i["metadata"]["name"] for i in deleted["items"]) == ["a", "b"]
    assert [i["metadata"]["name"] for i in http.get(CMS).json()["items"]] == ["c"]


def test_dry_run_all_validates_and_answers_without_storing(
    apiserver: ApiServer, http: httpx.Client, widgets: str
) -> None:
    rv = http.get(CMS).json()["metadata"]["resourceVersion"]
    created = http.post(CMS, params={"dryRun": "All"}, json=cm("a"))
    assert created.status_code == 201 and created.json()["metadata"]["uid"]
    assert http.get(f"{CMS}/a").status_code == 404
    invalid = http.post(widgets, params={"dryRun": "All"}, json={**widget(), "spec": {}})
    assert invalid.status_code == 422
    http.post(CMS, json=cm("b", k="1"))
    patched = http.patch(f"{CMS}/b", params={"dryRun": "All"}, json={"data": {"k": "2"}}, headers=MERGE)
    assert patched.json()["data"] == {"k": "2"} and http.get(f"{CMS}/b").json()["data"] == {"k": "1"}
    assert http.delete(f"{CMS}/b", params={"dryRun": "All"}).status_code == 200
    assert http.get(f"{CMS}/b").status_code == 200
    assert http.post(CMS, params={"dryRun": "Some"}, json=cm("c")).status_code == 400
    assert int(http.get(CMS).json()["metadata"]["resourceVersion"]) == int(rv) + 1


# -- custom resource schemas -----------------------------------------------------------------------
def test_custom_resources_are_validated_against_the_schema_with_422_naming_the_field(
    http: httpx.Client, widgets: str
) -> None:
    missing = http.post(widgets, json={**widget(), "spec": {"mode": "plan"}})
    body = missing.json()
    assert missing.status_code == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"] == [{"reason": "FieldValueRequired", "message": "Required value",
                                          "field": "spec.branch"}]
    assert body["message"] == 'Widget.example.com "w" is invalid: spec.branch: Required value'
    cases = {
        "spec.mode": {"mode": "destroy"},
        "spec.replicas": {"replicas": "two"},
        "spec.branch": {"branch": "Main Branch"},
        "spec.labels.team": {"labels": {"team": 3}},
        "spec.items[0].name": {"items": [{}]},
    }
    for field, spec in cases.items():
        response = http.post(widgets, json=widget(**spec))
        assert response.status_code == 422, field
        assert [c["field"] for c in response.json()["details"]["causes"]] == [field]
        assert field in response.json()["message"]
    enum = http.post(widgets, json=widget(mode="destroy")).json()["details"]["causes"][0]["message"]
    assert enum == 'Unsupported value: "destroy": supported values: "plan", "apply"'
    update = http.post(widgets, json=widget())
    assert update.status_code == 201
    assert http.patch(f"{widgets}/w", json={"spec": {"replicas": -1}}, headers=MERGE).status_code == 422


def test_schema_defaults_are_applied_and_unknown_fields_pruned_unless_preserved(
    http: httpx.Client, widgets: str
) -> None:
    created = http.post(widgets, json={**widget(extra={"any": {"thing": 1}}), "junk": 1,
                                       "spec": {"branch": "main", "unknown": True, "extra": {"any": [1]}}}).json()
    assert created["spec"] == {"branch": "main", "mode": "plan", "replicas": 1, "extra": {"any": [1]}}
    assert "junk" not in created


# -- errors -----------------------------------------------------------------------------------------
def test_errors_are_status_bodies_with_reason_and_code(http: httpx.Client, widgets: str) -> None:
    http.post(CMS, json=cm("a"))
    cases = [
        (http.get(f"{CMS}/nope"), 404, "NotFound"),
        (http.post(CMS, json=cm("a")), 409, "AlreadyExists"),
        (http.put(f"{CMS}/a", json={"metadata": {"name": "a", "resourceVersion": "1"}}), 409, "Conflict"),
        (http.post(widgets, json={**widget(), "spec": {}}), 422, "Invalid"),
        (http.post(CMS, content=b"{not json", headers={"Content-Type": "application/json"}), 400, "BadRequest"),
        (http.put(CMS, json=cm("x")), 405, "MethodNotAllowed"),
        (http.patch(f"{CMS}/a", content=b"{}", headers={"Content-Type": "text/plain"}), 415, "UnsupportedMediaType"),
    ]
    for response, code, reason in cases:
        body = response.json()
        assert (response.status_code, body["kind"], body["status"], body["code"], body["reason"]) == (
            code, "Status", "Failure", code, reason), body


def test_bad_input_never_causes_a_500_or_a_hang(http: httpx.Client, widgets: str) -> None:
    bad_requests = [
        ("POST", CMS, b"[1, 2]", "application/json"),
        ("POST", CMS, b'{"metadata": []}', "application/json"),
        ("POST", CMS, b'{"metadata": {"name": "UPPER"}}', "application/json"),
        ("POST", CMS, b'{"metadata": {"name": "a", "labels": {"x": 1}}}', "application/json"),
        ("POST", CMS, b'{"metadata": {"name": "a", "ownerReferences": [{"name": "x"}]}}', "application/json"),
        ("POST", CMS, b"", "application/json"),
        ("POST", CMS, b"\xff\xfe", "application/json"),
        ("PATCH", f"{CMS}/x", b"[", "application/merge-patch+json"),
        ("PATCH", f"{widgets}/x", b": : :", "application/apply-patch+yaml"),
        ("GET", f"{CMS}?labelSelector=a%20in%20(", b"", "application/json"),
        ("GET", f"{CMS}?fieldSelector=spec.nope%3Dx", b"", "application/json"),
        ("GET", f"{CMS}?limit=abc", b"", "application/json"),
        ("GET", f"{CMS}?limit=1&continue=garbage", b"", "application/json"),
        ("GET", f"{CMS}?watch=true&resourceVersion=abc", b"", "application/json"),
        ("GET", "/apis/nope.example.com/v1/things", b"", "application/json"),
        ("GET", "/api/v1/namespaces/default/nothings", b"", "application/json"),
        ("GET", "/api/v1/namespaces/default/configmaps/a/b/c", b"", "application/json"),
        ("POST", "/api/v1/namespaces/default/pods/p/log", b"{}", "application/json"),
        ("DELETE", f"{CMS}/a", b'{"propagationPolicy": "Sideways"}', "application/json"),
    ]
    for method, path, content, content_type in bad_requests:
        response = http.request(method, path, content=content, headers={"Content-Type": content_type}, timeout=5)
        assert 400 <= response.status_code < 500, (method, path, response.status_code, response.text)
        assert response.json()["kind"] == "Status", (method, path)


def test_unknown_resources_are_404(http: httpx.Client) -> None:
    for path in ("/apis/nope.example.com/v1", "/apis/nope.example.com", "/api/v2", "/nothing",
                 "/api/v1/namespaces/default/widgets"):
        response = http.get(path)
        assert response.status_code == 404 and response.json()["reason"] == "NotFound", path


def test_concurrent_writers_from_threads_get_distinct_resource_versions(
    apiserver: ApiServer, http: httpx.Client
) -> None:
    def write(i: int) -> None:
        with httpx.Client(base_url=apiserver.url, headers=apiserver.admin_headers) as own:
            for j in range(20):
                own.post(CMS, json=cm(f"t{i}-{j}"))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        assert all(o["metadata"]["resourceVersion"] for o in apiserver.list_objects("v1", "configmaps", "default"))
    for t in threads:
        t.join()
    versions = [o["metadata"]["resourceVersion"] for o in apiserver.list_objects("v1", "configmaps", "default")]
    assert len(versions) == 80 and len(set(versions)) == 80
