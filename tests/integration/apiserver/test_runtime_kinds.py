"""What the AGL needs of the API server: kinds defined, changed and removed at runtime, cluster-scoped
custom resources with finalizers and status, and garbage collection between custom kinds."""

from __future__ import annotations

import copy
import threading
from typing import Any

import httpx
from burrito_local.apiserver import ApiServer

from tests.integration.apiserver.conftest import MERGE, KubectlRun, widget, widget_crd
from tests.support.emulator import wait_for, watching

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
GADGETS = "/apis/example.com/v1/gadgets"


def gadget_crd() -> dict[str, Any]:
    """A cluster-scoped kind with a status subresource (like ApplicationDefinition)."""
    crd = widget_crd()
    crd["metadata"]["name"] = "gadgets.example.com"
    crd["spec"]["scope"] = "Cluster"
    crd["spec"]["names"] = {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"}
    return crd


def test_replacing_a_crd_changes_discovery_and_printer_columns(http: httpx.Client, widgets: str,
                                                               kubectl: KubectlRun) -> None:
    current = http.get(f"{CRDS}/widgets.example.com").json()
    changed = copy.deepcopy(current)
    changed["spec"]["names"]["shortNames"] = ["wdg"]
    changed["spec"]["versions"][0]["additionalPrinterColumns"] = [
        {"name": "Ready", "type": "string", "jsonPath": ".status.state"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
    assert http.put(f"{CRDS}/widgets.example.com", json=changed).status_code == 200
    [entry] = [r for r in http.get("/apis/example.com/v1").json()["resources"] if r["name"] == "widgets"]
    assert entry["shortNames"] == ["wdg"]
    http.post(widgets, json=widget())
    http.patch(f"{widgets}/w/status", headers=MERGE,
               json={"status": {"state": "True"}})
    lines = kubectl("get", "wdg").stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "AGE"] and lines[1].split()[:2] == ["w", "True"]


def test_cluster_scoped_custom_resources_keep_finalizers_and_a_status(http: httpx.Client) -> None:
    assert http.post(CRDS, json=gadget_crd()).status_code == 201
    [entry] = [r for r in http.get("/apis/example.com/v1").json()["resources"] if r["name"] == "gadgets"]
    assert entry["namespaced"] is False
    body = {"apiVersion": "example.com/v1", "kind": "Gadget",
            "metadata": {"name": "g", "finalizers": ["example.com/hold"]}, "spec": {"branch": "main"}}
    created = http.post(GADGETS, json=body)
    assert created.status_code == 201 and "namespace" not in created.json()["metadata"]
    assert http.patch(f"{GADGETS}/g/status", headers=MERGE, json={"status": {"state": "Ready"}}).status_code == 200
    assert http.delete(f"{GADGETS}/g").status_code == 200
    held = http.get(f"{GADGETS}/g").json()
    assert held["metadata"]["deletionTimestamp"] and held["status"] == {"state": "Ready"}
    http.patch(f"{GADGETS}/g", headers=MERGE, json={"metadata": {"finalizers": None}})
    assert http.get(f"{GADGETS}/g").status_code == 404


def test_deleting_a_custom_owner_collects_dependents_of_another_custom_kind(apiserver: ApiServer,
                                                                             http: httpx.Client, widgets: str) -> None:
    http.post(CRDS, json=gadget_crd())
    owner = http.post(widgets, json=widget("owner")).json()
    ref = {"apiVersion": "example.com/v1", "kind": "Widget", "name": "owner", "uid": owner["metadata"]["uid"],
           "controller": True, "blockOwnerDeletion": True}
    held = {**widget("dependent"), "metadata": {"name": "dependent", "ownerReferences": [ref],
                                                "finalizers": ["example.com/destroy-first"]}}
    http.post(widgets, json=held)
    http.delete(f"{widgets}/owner")
    dependent = wait_for(lambda: http.get(f"{widgets}/dependent").json()["metadata"].get("deletionTimestamp"))
    assert dependent, "the dependent is marked for deletion and waits for its own finalizer"
    http.patch(f"{widgets}/dependent", headers=MERGE, json={"metadata": {"finalizers": None}})
    assert http.get(f"{widgets}/dependent").status_code == 404


def test_a_watch_ends_when_its_kind_is_removed_and_watching_again_is_404(apiserver: ApiServer,
                                                                          http: httpx.Client, widgets: str) -> None:
    version = http.get(widgets).json()["metadata"]["resourceVersion"]
    ended = threading.Event()

    def watch() -> None:
        with httpx.stream("GET", apiserver.url + widgets, params={"watch": "true", "resourceVersion": version},
                          headers=apiserver.admin_headers,
                          timeout=10) as response:
            for _ in response.iter_lines():
                pass
        ended.set()

    reader = threading.Thread(target=watch)
    reader.start()
    wait_for(lambda: watching(apiserver, "/widgets"))
    http.delete(f"{CRDS}/widgets.example.com")
    assert ended.wait(5), "the stream ends when the kind stops being served"
    reader.join(5)
    assert http.get(widgets, params={"watch": "true"}).status_code == 404
