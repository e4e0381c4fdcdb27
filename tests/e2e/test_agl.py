"""The AGL end to end (issue 5): an ApplicationDefinition serves a kind, `kubectl` gets it, instances
become layers that real terraform plans and applies, approval happens on the instance, outputs land in a
Secret, invalid instances are named and get no layer, deleting an instance destroys and removes its layer."""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from burrito_py.api import annotations as ann
from tests.support.git_repos import TestRepo, make_repo
from tests.support.real_cluster import RealCluster

from .conftest import Platform, wait_for

VERSION, PLURAL = "v1alpha1", "buckets"
AGL_GROUP, AGL_VERSION, DEFINITIONS = "agl.burrito-py.io", "v1alpha1", "applicationdefinitions"

BUCKET_TF = """
terraform {
  backend "local" {}
}

variable "size" {
  type = number
}

variable "storage_pool" {
  type    = string
  default = "standard"
}

resource "terraform_data" "bucket" {
  input = { size = var.size, pool = var.storage_pool }
}

output "endpoint" {
  value = "https://${var.storage_pool}.storage.example/${var.size}"
}

output "size" {
  value = terraform_data.bucket.output.size
}
"""


@pytest.fixture
def modules(tmp_path: Path) -> TestRepo:
    r = make_repo(tmp_path / "modules")
    r.commit({"buckets/main.tf": BUCKET_TF}, "bucket module")
    return r


@dataclass
class Buckets:
    """The test's own Bucket kind on the session's control plane. ApplicationDefinitions and their CRDs are
    cluster-scoped, and the controllers serve every definition of the cluster (they have no selector for them):
    so each test's kind is served in a group of its own (`t<hex>.apps.burrito-py.io`, CRD `buckets.<group>`)
    by a definition of its own name, and `agl_kind` removes both before the test's controllers stop, leaving
    nothing for a later test's controllers to adopt (docs/architecture.md §22.8)."""

    platform: Platform
    group: str
    definition: str

    @property
    def crd(self) -> str:
        return f"{PLURAL}.{self.group}"

    @property
    def resource(self) -> str:
        """What kubectl is given: the plural with its group, never ambiguous on a shared control plane."""
        return f"{PLURAL}.{self.group}"

    @property
    def singular(self) -> str:
        return f"bucket.{self.group}"

    def define(self, repo: TestRepo, **terraform: Any) -> None:
        platform = self.platform
        platform.create_repository("modules", repo.url)
        state = platform.workdir / "state"
        body = {
            "apiVersion": f"{AGL_GROUP}/{AGL_VERSION}", "kind": "ApplicationDefinition",
            "metadata": {"name": self.definition},
            "spec": {
                "application": {"kind": "Bucket", "plural": PLURAL, "singular": "bucket", "group": self.group,
                                "openAPISchema": {
                    "type": "object", "required": ["size"],
                    "properties": {"size": {"type": "integer", "minimum": 1}, "storagePool": {"type": "string"}}}},
                "backend": {"type": "Terraform", "terraform": {
                    "repository": {"name": "modules"}, "branch": "main", "path": "buckets", "prefix": "bucket-",
                    "overrideRunnerSpec": {"extraInitArgs": [f"-backend-config=path={state}/{{{{ layer }}}}.tfstate"]},
                    **terraform}},
            },
        }
        state.mkdir(parents=True, exist_ok=True)
        platform.custom.create_cluster_custom_object(AGL_GROUP, AGL_VERSION, DEFINITIONS, body)
        wait_for(lambda: _condition(self.definition_body(), "Ready").get("status") == "True",
                 30, interval=0.1, what="definition served")

    def definition_body(self) -> dict[str, Any]:
        return self.platform.custom.get_cluster_custom_object(AGL_GROUP, AGL_VERSION, DEFINITIONS, self.definition)

    def create(self, name: str, **spec: Any) -> None:
        body = {"apiVersion": f"{self.group}/{VERSION}", "kind": "Bucket", "metadata": {"name": name}, "spec": spec}
        self.platform.custom.create_namespaced_custom_object(self.group, VERSION, self.platform.namespace, PLURAL,
                                                             body)

    def get(self, name: str) -> dict[str, Any]:
        return self.platform.custom.get_namespaced_custom_object(self.group, VERSION, self.platform.namespace,
                                                                 PLURAL, name)

    def patch(self, name: str, body: dict[str, Any]) -> None:
        self.platform.custom.patch_namespaced_custom_object(self.group, VERSION, self.platform.namespace, PLURAL,
                                                            name, body)

    def delete(self, name: str) -> None:
        self.platform.custom.delete_namespaced_custom_object(self.group, VERSION, self.platform.namespace, PLURAL,
                                                             name)

    def wait(self, name: str, kind: str, status: str, reason: str | None = None,
             timeout: float = 90) -> dict[str, Any]:
        def met() -> dict[str, Any] | None:
            c = _condition(self.get(name), kind)
            return c if c.get("status") == status and (reason is None or c.get("reason") == reason) else None

        try:
            return wait_for(met, timeout, interval=0.1, what=f"bucket {name} {kind}={status} {reason or ''}")
        except AssertionError:
            raise AssertionError(f"bucket {name}: status={self.get(name).get('status')}") from None


def remove_kind(cluster: RealCluster, namespace: str, kind: Buckets, timeout: float = 60.0) -> None:
    """Delete the kind's instances, then its definition, and wait while the test's controllers (still running)
    withdraw the CRD and release the definition. If they do not, the definition's finalizer is stripped and the
    CRD deleted as the admin, so the session stays clean, and the teardown fails naming what was left."""
    admin = cluster.admin
    collection = f"/apis/{kind.group}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    status, listing = admin.call("GET", collection)
    for item in (listing.get("items") or ()) if status == 200 and isinstance(listing, dict) else ():
        admin.call("DELETE", f"{collection}/{item['metadata']['name']}")
    definition = f"/apis/{AGL_GROUP}/{AGL_VERSION}/{DEFINITIONS}/{kind.definition}"
    crd = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{kind.crd}"
    admin.call("DELETE", definition)
    deadline = time.monotonic() + timeout
    while admin.call("GET", definition)[0] != 404 or admin.call("GET", crd)[0] != 404:
        if time.monotonic() > deadline:
            left = admin.call("GET", definition)[1]
            admin.call("PATCH", definition, {"metadata": {"finalizers": None}},
                       content_type="application/merge-patch+json")
            admin.call("DELETE", crd)
            shown = left.get("status") if isinstance(left, dict) else left
            raise AssertionError(f"the controllers did not withdraw {kind.crd} and release {kind.definition} within "
                                 f"{timeout:g}s (removed by the admin): {shown}")
        time.sleep(0.2)


@contextlib.contextmanager
def own_kind(platform: Platform, cluster: RealCluster) -> Iterator[Buckets]:
    """A Bucket kind of the test's own (see Buckets) on `cluster`; removed on leaving, which must happen while
    the test's controllers still run."""
    tag = uuid.uuid4().hex[:8]
    kind = Buckets(platform, f"t{tag}.apps.burrito-py.io", f"buckets-{tag}")
    yield kind
    remove_kind(cluster, platform.namespace, kind)


@pytest.fixture
def buckets(platform: Platform, real_cluster: RealCluster) -> Iterator[Buckets]:
    """The test's Bucket kind (torn down before `platform`, so while its controllers run)."""
    with own_kind(platform, real_cluster) as kind:
        yield kind


def _condition(body: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (body.get("status") or {}).get("conditions") or () if c["type"] == kind), {})


def kubectl(platform: Platform, *args: str) -> str:
    done = subprocess.run(["kubectl", "--kubeconfig", str(platform.kubeconfig), *args], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def secret_values(platform: Platform, name: str) -> dict[str, str]:
    data = platform.core.read_namespaced_secret(name, platform.namespace).data or {}
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def layer_exists(platform: Platform, name: str) -> bool:
    items = platform.custom.list_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                          "terraformlayers")
    return any(item["metadata"]["name"] == name for item in items["items"])


def test_a_auto_approved_instance_is_applied_ready_with_outputs_in_a_secret(
    platform: Platform, buckets: Buckets, modules: TestRepo
) -> None:
    buckets.define(modules, approvePlan="auto")
    assert kubectl(platform, "get", buckets.resource) == "", \
        "the kind is served (kubectl says 'No resources found' on stderr)"
    buckets.create("photos", size=3, storagePool="fast")
    layer = wait_for(lambda: layer_exists(platform, "bucket-photos") and platform.layer("bucket-photos"), 30)
    assert layer["spec"]["vars"] == {"size": 3, "storage_pool": "fast"}

    ready = buckets.wait("photos", "Ready", "True", "Applied")
    assert ready["message"].startswith("Applied: Plan: 1 to add")
    status = buckets.get("photos")["status"]
    assert status["lastAppliedRevision"] == modules.head
    assert sorted(status["outputs"]) == ["endpoint", "size"]
    assert secret_values(platform, "bucket-photos-outputs") == {"endpoint": "https://fast.storage.example/3",
                                                                "size": "3"}
    assert [r["spec"]["action"] for r in platform.runs("bucket-photos")] == ["plan", "apply"]
    state = json.loads((platform.workdir / "state" / "bucket-photos.tfstate").read_text())
    assert state["resources"][0]["instances"][0]["attributes"]["input"]["value"] == {"size": 3, "pool": "fast"}

    lines = kubectl(platform, "get", buckets.resource).splitlines()
    assert lines[0].split() == ["NAME", "READY", "PENDING", "APPROVAL", "AGE"]
    assert lines[1].split()[:3] == ["photos", "True", "False"]
    assert kubectl(platform, "get", "applicationdefinitions", buckets.definition, "-o",
                   "jsonpath={.status.instances}") == "1"


def test_b_manual_approval_on_the_instance_and_a_spec_change_voids_it(
    platform: Platform, buckets: Buckets, modules: TestRepo
) -> None:
    buckets.define(modules)  # approvePlan: manual by default
    buckets.create("photos", size=3)
    pending = buckets.wait("photos", "PendingApproval", "True", "PlanAwaitsApproval")
    plan_sum = kubectl(platform, "get", buckets.singular, "photos", "-o", "jsonpath={.status.pendingPlan.sum}")
    assert plan_sum.startswith("sha256:") and plan_sum in pending["message"]
    assert _condition(buckets.get("photos"), "Ready")["reason"] == "WaitingForApproval"

    wrong = "sha256:" + "0" * 64
    kubectl(platform, "annotate", buckets.singular, "photos", f"{ann.APPROVE_PLAN}={wrong}")
    time.sleep(3)  # a window in which a wrong controller would apply
    assert [r["spec"]["action"] for r in platform.runs("bucket-photos")] == ["plan"]
    assert _condition(buckets.get("photos"), "PendingApproval")["status"] == "True"

    kubectl(platform, "annotate", buckets.singular, "photos", "--overwrite", f"{ann.APPROVE_PLAN}={plan_sum}")
    buckets.wait("photos", "Ready", "True", "Applied")
    assert platform.layer("bucket-photos")["metadata"]["annotations"][ann.APPLY_SUM] == plan_sum
    assert _condition(buckets.get("photos"), "PendingApproval")["status"] == "False"

    # A new spec is planned at once; its plan has another sum, and the old approval does not apply it.
    buckets.patch("photos", {"spec": {"size": 5}})

    def new_plan_pending() -> str | None:
        found = (buckets.get("photos").get("status") or {}).get("pendingPlan", {}).get("sum")
        return found if found and found != plan_sum else None

    new_sum = wait_for(new_plan_pending, 90, interval=0.1, what="the new spec's plan to wait for approval")
    assert platform.layer("bucket-photos")["spec"]["vars"] == {"size": 5}
    time.sleep(3)
    assert [r["spec"]["action"] for r in platform.runs("bucket-photos")].count("apply") == 1
    assert _condition(buckets.get("photos"), "Ready")["status"] == "False"
    kubectl(platform, "annotate", buckets.singular, "photos", "--overwrite", f"{ann.APPROVE_PLAN}={new_sum}")
    buckets.wait("photos", "Ready", "True", "Applied")
    assert secret_values(platform, "bucket-photos-outputs")["size"] == "5"


def test_c_invalid_instances_are_named_and_get_no_layer(
    platform: Platform, buckets: Buckets, modules: TestRepo
) -> None:
    buckets.define(modules, approvePlan="auto")
    buckets.create("typo", size="x")
    buckets.create("private", size=1, _token="s3cr3t")
    typo = buckets.wait("typo", "Ready", "False", "Invalid", timeout=30)
    assert typo["message"] == "spec.size: 'x' is not of type 'integer'"
    private = buckets.wait("private", "Ready", "False", "Invalid", timeout=30)
    assert private["message"] == "spec._token: keys starting with '_' are reserved and are not Terraform variables"

    def warned() -> set[tuple[str, str]]:
        events = platform.core.list_namespaced_event(platform.namespace).items
        return {(e.involved_object.name, e.reason) for e in events if e.type == "Warning"}

    # The event follows the status write: wait for it rather than read once.
    wait_for(lambda: {("typo", "InvalidSpec"), ("private", "InvalidSpec")} <= warned(), 10, interval=0.1,
             what="InvalidSpec warnings for both instances")
    assert "spec.size" in kubectl(platform, "describe", buckets.singular, "typo")
    time.sleep(1)
    assert not layer_exists(platform, "bucket-typo") and not layer_exists(platform, "bucket-private")

    # Fixing the spec is enough: the layer follows.
    buckets.patch("typo", {"spec": {"size": 2}})
    buckets.wait("typo", "Ready", "True", "Applied")


def test_d_deleting_an_instance_destroys_then_removes_its_layer(
    platform: Platform, buckets: Buckets, modules: TestRepo
) -> None:
    buckets.define(modules, approvePlan="auto", destroyResourcesOnDeletion=True)
    buckets.create("photos", size=3)
    buckets.wait("photos", "Ready", "True", "Applied")
    state_file = platform.workdir / "state" / "bucket-photos.tfstate"
    assert json.loads(state_file.read_text())["resources"]

    buckets.delete("photos")
    wait_for(lambda: not layer_exists(platform, "bucket-photos"), 120, interval=0.2, what="layer destroyed and gone")
    assert json.loads(state_file.read_text())["resources"] == [], "the bucket's resources were destroyed"

    # The definition is released once no bucket remains, and the kind is no longer served.
    platform.custom.delete_cluster_custom_object(AGL_GROUP, AGL_VERSION, DEFINITIONS, buckets.definition)
    wait_for(lambda: not [d for d in platform.custom.list_cluster_custom_object(AGL_GROUP, AGL_VERSION, DEFINITIONS)[
        "items"] if d["metadata"]["name"] == buckets.definition], 30, what="definition released")
    gone = subprocess.run(["kubectl", "--kubeconfig", str(platform.kubeconfig), "get", buckets.resource],
                          capture_output=True, text=True, timeout=60, check=False)
    assert gone.returncode != 0 and "buckets" in gone.stderr
