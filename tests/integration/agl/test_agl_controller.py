"""The AGL controller against the API emulator (no terraform): kinds served and withdrawn at runtime,
instances compiled into layers, status projected back, definitions held while instances remain.

The AGL runs alone here, so the tests can play the layer controller and the runner (write a layer's
status and annotations) without the real one rewriting them."""

from __future__ import annotations

import asyncio
import copy
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kopf
import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier

from burrito_py.agl.compile import LABEL_APP_GROUP, LABEL_APP_KIND, LABEL_APP_NAME
from burrito_py.agl.operator import register_agl
from burrito_py.api import annotations as ann
from burrito_py.api.crdgen import generate_crds
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.kube.kubeconfig import kubeconfig_login
from tests.support.emulator import wait_for

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
DEFS = "/apis/agl.burrito-py.io/v1alpha1/applicationdefinitions"
BUCKETS = "/apis/apps.burrito-py.io/v1alpha1/namespaces/default/buckets"
LAYERS = "/apis/terraform.burrito-py.io/v1alpha1/namespaces/default/terraformlayers"
MERGE = {"Content-Type": "application/merge-patch+json"}
SUM = "sha256:" + "c" * 64

DEFINITION: dict[str, Any] = {
    "apiVersion": "agl.burrito-py.io/v1alpha1", "kind": "ApplicationDefinition", "metadata": {"name": "buckets"},
    "spec": {
        "application": {"kind": "Bucket", "plural": "buckets", "singular": "bucket", "shortNames": ["bkt"],
                        "openAPISchema": {"type": "object", "properties": {"size": {"type": "integer"},
                                                                           "storagePool": {"type": "string"}}}},
        "backend": {"type": "Terraform", "terraform": {"repository": {"name": "modules"}, "branch": "main",
                                                       "path": "bucket", "prefix": "bkt-"}},
    },
}


class Cluster:
    def __init__(self, api: ApiServer, kubeconfig: Path) -> None:
        self.api, self.kubeconfig = api, kubeconfig
        self.http = httpx.Client(base_url=api.url, timeout=10, headers=api.admin_headers)

    def get(self, path: str) -> dict[str, Any] | None:
        response = self.http.get(path)
        return response.json() if response.status_code == 200 else None

    def bucket(self, name: str, **spec: Any) -> dict[str, Any]:
        body = {"apiVersion": "apps.burrito-py.io/v1alpha1", "kind": "Bucket", "metadata": {"name": name},
                "spec": spec}
        response = self.http.post(BUCKETS, json=body)
        assert response.status_code == 201, response.text
        return response.json()

    def condition(self, path: str, kind: str = "Ready") -> dict[str, Any] | None:
        body = self.get(path) or {}
        return next((c for c in (body.get("status") or {}).get("conditions") or () if c["type"] == kind), None)

    def wait_condition(self, path: str, status: str, reason: str | None = None, kind: str = "Ready",
                       timeout: float = 10) -> dict[str, Any]:
        def met() -> dict[str, Any] | None:
            c = self.condition(path, kind)
            return c if c and c["status"] == status and (reason is None or c["reason"] == reason) else None

        try:
            return wait_for(met, timeout, interval=0.02, what=f"{path} {kind}={status} {reason or ''}")
        except AssertionError:
            raise AssertionError(f"{path}: {kind} is {self.condition(path, kind)}") from None

    def kubectl(self, *args: str) -> str:
        done = subprocess.run(["kubectl", "--kubeconfig", str(self.kubeconfig), *args], capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    kubeconfig = tmp_path / "kubeconfig"
    with ApiServer(pod_log_dir=tmp_path / "pod-logs") as api:
        api.write_kubeconfig(kubeconfig)
        applier = Applier(api.url)
        for crd in generate_crds().values():
            applier.apply(crd)
        applier.close()
        registry = kopf.OperatorRegistry()
        kopf.on.login(registry=registry)(lambda **_: kubeconfig_login(kubeconfig))
        register_agl(registry, ControllerSettings(), kubeconfig)
        stop, ready = threading.Event(), threading.Event()
        thread = threading.Thread(target=lambda: asyncio.run(kopf.operator(
            registry=registry, standalone=True, clusterwide=True, stop_flag=stop, ready_flag=ready)), daemon=True)
        thread.start()
        assert ready.wait(30)
        c = Cluster(api, kubeconfig)
        yield c
        c.http.close()
        stop.set()
        thread.join(30)


def define(cluster: Cluster, definition: dict[str, Any] = DEFINITION) -> None:
    assert cluster.http.post(DEFS, json=definition).status_code == 201
    cluster.wait_condition(f"{DEFS}/{definition['metadata']['name']}", "True", "Served")


def test_a_definition_serves_its_kind_and_kubectl_gets_it(cluster: Cluster) -> None:
    define(cluster)
    crd = cluster.get(f"{CRDS}/buckets.apps.burrito-py.io")
    assert crd is not None and crd["spec"]["names"]["shortNames"] == ["bkt"]
    definition = cluster.get(f"{DEFS}/buckets")
    assert definition is not None and "agl.burrito-py.io/instances" in definition["metadata"]["finalizers"]
    assert definition["status"]["servedCrd"] == "buckets.apps.burrito-py.io"
    cluster.bucket("photos", size=1)
    wait_for(lambda: cluster.get(f"{DEFS}/buckets")["status"].get("instances") == 1, 10)  # type: ignore[index]
    lines = cluster.kubectl("get", "buckets").splitlines()
    assert lines[0].split() == ["NAME", "READY", "PENDING", "APPROVAL", "AGE"]
    assert lines[1].split()[0] == "photos"
    assert cluster.kubectl("get", "bkt", "photos", "-o", "jsonpath={.status.layer}") == "bkt-photos"
    row = cluster.kubectl("get", "applicationdefinitions").splitlines()[1].split()
    assert row[:5] == ["buckets", "Bucket", "apps.burrito-py.io", "True", "1"]


def test_an_instance_becomes_a_layer_owned_by_it_and_goes_with_it(cluster: Cluster) -> None:
    define(cluster)
    bucket = cluster.bucket("photos", size=3, storagePool="fast")
    layer = wait_for(lambda: cluster.get(f"{LAYERS}/bkt-photos"), 10)
    assert layer["spec"]["vars"] == {"size": 3, "storage_pool": "fast"}
    assert layer["spec"]["writeOutputsToSecret"] == {"name": "bucket-photos-outputs"}
    assert layer["spec"]["approvePlan"] == "manual"
    assert layer["metadata"]["labels"][LABEL_APP_KIND] == "Bucket"
    assert layer["metadata"]["ownerReferences"][0]["uid"] == bucket["metadata"]["uid"]
    status = wait_for(lambda: (cluster.get(f"{BUCKETS}/photos") or {}).get("status"), 10)
    assert status["layer"] == "bkt-photos" and status["outputsSecret"] == "bucket-photos-outputs"

    cluster.http.patch(f"{BUCKETS}/photos", headers=MERGE, json={"spec": {"size": 5, "storagePool": None}})
    def realigned() -> dict[str, Any] | None:
        layer = cluster.get(f"{LAYERS}/bkt-photos")
        return layer if layer is not None and layer["spec"]["vars"] == {"size": 5} else None

    changed = wait_for(realigned, 10)
    assert ann.SYNC_NOW in changed["metadata"]["annotations"], "new variables are planned at once"

    cluster.http.delete(f"{BUCKETS}/photos")
    wait_for(lambda: cluster.get(f"{LAYERS}/bkt-photos") is None, 10, what="layer garbage-collected")


def test_invalid_instances_get_ready_false_a_warning_and_no_layer(cluster: Cluster) -> None:
    define(cluster)
    cluster.bucket("bad", size="x", _secret=1)
    ready = cluster.wait_condition(f"{BUCKETS}/bad", "False", "Invalid")
    assert ready["message"] == ("spec.size: 'x' is not of type 'integer'; "
                                "spec._secret: keys starting with '_' are reserved and are not Terraform variables")
    events = wait_for(lambda: [e for e in cluster.get("/api/v1/namespaces/default/events")["items"]  # type: ignore[index]
                               if e["involvedObject"]["name"] == "bad"], 10)
    assert [(e["type"], e["reason"]) for e in events] == [("Warning", "InvalidSpec")]
    assert "spec.size" in events[0]["message"]
    assert cluster.get(f"{LAYERS}/bkt-bad") is None

    cluster.bucket("n" * 60, size=1)
    long = cluster.wait_condition(f"{BUCKETS}/{'n' * 60}", "False", "Invalid")
    assert long["message"].startswith("metadata.name: the TerraformLayer name 'bkt-nnn")


def test_layer_progress_and_approval_are_projected_and_copied(cluster: Cluster) -> None:
    define(cluster)
    cluster.bucket("photos", size=1)
    wait_for(lambda: cluster.get(f"{LAYERS}/bkt-photos"), 10)
    # What the runner and layer controller write once a plan waits for approval.
    cluster.http.patch(f"{LAYERS}/bkt-photos", headers=MERGE, json={"metadata": {"annotations": {
        ann.PLAN_SUM: SUM, ann.APPLY_COMMIT: "abc123"}}})
    cluster.http.patch(f"{LAYERS}/bkt-photos/status", headers=MERGE, json={"status": {
        "state": "Idle", "conditions": [], "pendingPlan": {"sum": SUM, "run": "bkt-photos-plan-1/1"},
        "outputs": ["url"]}})
    pending = cluster.wait_condition(f"{BUCKETS}/photos", "True", "PlanAwaitsApproval", kind="PendingApproval")
    assert f"kubectl annotate buckets photos {ann.APPROVE_PLAN}={SUM}" in pending["message"]
    assert cluster.kubectl("get", "bucket", "photos", "-o", "jsonpath={.status.pendingPlan.sum}") == SUM
    status = cluster.get(f"{BUCKETS}/photos")["status"]  # type: ignore[index]
    assert status["lastAppliedRevision"] == "abc123" and status["outputs"] == ["url"]

    cluster.kubectl("annotate", "bucket", "photos", f"{ann.APPROVE_PLAN}={SUM}")
    wait_for(lambda: cluster.get(f"{LAYERS}/bkt-photos")["metadata"]["annotations"].get(  # type: ignore[index]
        ann.APPROVE_PLAN) == SUM, 10, what="approval copied to the layer")
    cluster.wait_condition(f"{BUCKETS}/photos", "True", "Approved", kind="PendingApproval")

    cluster.http.patch(f"{LAYERS}/bkt-photos", headers=MERGE, json={"metadata": {"annotations": {
        ann.APPLY_SUM: SUM}}})
    cluster.http.patch(f"{LAYERS}/bkt-photos/status", headers=MERGE, json={"status": {"pendingPlan": None}})
    cluster.wait_condition(f"{BUCKETS}/photos", "True", "Applied")
    cluster.wait_condition(f"{BUCKETS}/photos", "False", "NoPendingPlan", kind="PendingApproval")
    assert "pendingPlan" not in cluster.get(f"{BUCKETS}/photos")["status"]  # type: ignore[index]


def test_definition_changes_realign_every_layer(cluster: Cluster) -> None:
    define(cluster)
    for name in ("a", "b"):
        cluster.bucket(name, size=1)
    for name in ("a", "b"):
        wait_for(lambda n=name: cluster.get(f"{LAYERS}/bkt-{n}"), 10)
    cluster.http.patch(f"{DEFS}/buckets", headers=MERGE, json={"spec": {"backend": {"terraform": {
        "approvePlan": "auto", "destroyResourcesOnDeletion": True}}}})
    for name in ("a", "b"):
        wait_for(lambda n=name: cluster.get(f"{LAYERS}/bkt-{n}")["spec"]["approvePlan"] == "auto", 10)  # type: ignore[index]
        assert cluster.get(f"{LAYERS}/bkt-{name}")["spec"]["destroyResourcesOnDeletion"] is True  # type: ignore[index]
    # A tightened schema makes existing instances invalid (the API server never re-validates them).
    cluster.http.patch(f"{DEFS}/buckets", headers=MERGE, json={"spec": {"application": {"openAPISchema": {
        "properties": {"size": {"type": "integer", "minimum": 2}}}}}})
    ready = cluster.wait_condition(f"{BUCKETS}/a", "False", "Invalid")
    assert ready["message"] == "spec.size: 1 is less than the minimum of 2"
    # The prefix moves the layers: the old ones go, new ones come.
    cluster.http.patch(f"{DEFS}/buckets", headers=MERGE, json={"spec": {
        "application": {"openAPISchema": {"properties": {"size": {"minimum": 1}}}},
        "backend": {"terraform": {"prefix": "store-"}}}})
    for name in ("a", "b"):
        wait_for(lambda n=name: cluster.get(f"{LAYERS}/store-{n}"), 10)
        wait_for(lambda n=name: cluster.get(f"{LAYERS}/bkt-{n}") is None, 10)


def test_a_deleted_definition_waits_for_its_instances_then_stops_serving(cluster: Cluster) -> None:
    define(cluster)
    cluster.bucket("a", size=1)
    wait_for(lambda: cluster.get(f"{LAYERS}/bkt-a"), 10)
    cluster.http.delete(f"{DEFS}/buckets")
    held = cluster.wait_condition(f"{DEFS}/buckets", "False", "InstancesRemain")
    assert "default/a" in held["message"]
    assert cluster.get(f"{CRDS}/buckets.apps.burrito-py.io") is not None
    assert cluster.get(BUCKETS) is not None, "still served"

    cluster.http.delete(f"{BUCKETS}/a")
    wait_for(lambda: cluster.get(f"{DEFS}/buckets") is None, 15, what="definition released")
    assert cluster.get(f"{CRDS}/buckets.apps.burrito-py.io") is None
    assert cluster.http.get("/apis/apps.burrito-py.io/v1alpha1").status_code == 404
    # The controllers are still alive: a new definition is served again.
    define(cluster)
    cluster.bucket("again", size=1)
    wait_for(lambda: cluster.get(f"{LAYERS}/bkt-again"), 10)


def test_a_deleted_definition_keeps_its_kind_until_the_layers_of_deleted_instances_are_gone(
    cluster: Cluster,
) -> None:
    """A destroying layer must not see its owner kind withdrawn: the destroy guard would take that for a
    CRD's deletion and skip the destroy the instance's deletion asked for."""
    define(cluster)
    cluster.bucket("a", size=1)
    wait_for(lambda: cluster.get(f"{LAYERS}/bkt-a"), 10)
    # Play the layer controller: the destroy finalizer a layer with destroyResourcesOnDeletion carries.
    cluster.http.patch(f"{LAYERS}/bkt-a", headers=MERGE,
                       json={"metadata": {"finalizers": ["terraform.burrito-py.io/destroy"]}})
    cluster.http.delete(f"{DEFS}/buckets")
    cluster.http.delete(f"{BUCKETS}/a")
    wait_for(lambda: (cluster.get(f"{LAYERS}/bkt-a") or {}).get("metadata", {}).get("deletionTimestamp"), 10,
             what="the layer deleted by garbage collection")
    held = cluster.wait_condition(f"{DEFS}/buckets", "False", "LayersRemain", timeout=15)
    assert "default/bkt-a" in held["message"]
    assert cluster.get(f"{CRDS}/buckets.apps.burrito-py.io") is not None, "the kind stays served"

    cluster.http.patch(f"{LAYERS}/bkt-a", headers=MERGE, json={"metadata": {"finalizers": None}})
    wait_for(lambda: cluster.get(f"{DEFS}/buckets") is None, 15, what="definition released")
    assert cluster.get(f"{CRDS}/buckets.apps.burrito-py.io") is None


def test_attack_a_layer_with_a_kinds_labels_never_holds_its_definitions_deletion(cluster: Cluster) -> None:
    """Attack test: a tenant who may create layers gave one the labels the AGL puts on a Bucket's layers (no owner).
    Deleting the Bucket definition then waited `LayersRemain` for good: the labels alone counted the layer as the
    kind's, and it was never deleted (it has no instance for an owner). Now only a layer an instance of the kind owns
    holds the definition; the forged one is left alone, someone else's."""
    define(cluster)
    forged = {"apiVersion": ann.API_VERSION, "kind": "TerraformLayer",
              "metadata": {"name": "forged", "labels": {LABEL_APP_KIND: "Bucket", LABEL_APP_GROUP: "apps.burrito-py.io",
                                                        LABEL_APP_NAME: "x"}},
              "spec": {"repository": {"name": "x"}, "branch": "main", "path": "."}}
    assert cluster.http.post(LAYERS, json=forged).status_code == 201
    cluster.http.delete(f"{DEFS}/buckets")
    wait_for(lambda: cluster.get(f"{DEFS}/buckets") is None, 15, what="definition released")
    assert cluster.get(f"{LAYERS}/forged") is not None, "someone else's layer is not the AGL's to delete"


def test_conflicts_are_reported_not_fought(cluster: Cluster) -> None:
    define(cluster)
    twin = copy.deepcopy(DEFINITION)
    twin["metadata"]["name"] = "twin"
    twin["spec"]["application"]["plural"] = "pails"
    twin["spec"]["application"]["singular"] = "pail"
    cluster.http.post(DEFS, json=twin)
    taken = cluster.wait_condition(f"{DEFS}/twin", "False", "KindTaken")
    assert "ApplicationDefinition buckets" in taken["message"]

    layer = {"apiVersion": ann.API_VERSION, "kind": "TerraformLayer", "metadata": {"name": "bkt-mine"},
             "spec": {"repository": {"name": "x"}, "branch": "main", "path": "."}}
    assert cluster.http.post(LAYERS, json=layer).status_code == 201
    cluster.bucket("mine", size=1)
    conflict = cluster.wait_condition(f"{BUCKETS}/mine", "False", "LayerConflict")
    assert "bkt-mine already exists" in conflict["message"]
    assert cluster.get(f"{LAYERS}/bkt-mine")["spec"]["path"] == "."  # type: ignore[index]

    invalid = copy.deepcopy(DEFINITION)
    invalid["metadata"]["name"] = "broken"
    invalid["spec"]["backend"]["terraform"]["writeOutputsToSecret"] = {"name": "{{ nope }}"}
    invalid["spec"]["application"].update(kind="Broken", plural="brokens", singular="broken")
    cluster.http.post(DEFS, json=invalid)
    ready = cluster.wait_condition(f"{DEFS}/broken", "False", "Invalid")
    assert ready["message"].startswith("spec.backend.terraform.writeOutputsToSecret.name: unknown variable 'nope'")
