"""The AGL end to end (issue 5): an ApplicationDefinition serves a kind, `kubectl` gets it, instances
become layers that real terraform plans and applies, approval happens on the instance, outputs land in a
Secret, invalid instances are named and get no layer, deleting an instance destroys and removes its layer."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from burrito_py.api import annotations as ann
from tests.support.git_repos import TestRepo, make_repo

from .conftest import Platform, wait_for


@pytest.fixture
def platform(emulator_platform: Platform) -> Platform:
    """On the API emulator: this file is not ported to the real control plane yet (docs/architecture.md §22.8)."""
    return emulator_platform


GROUP, VERSION, PLURAL = "apps.burrito-py.io", "v1alpha1", "buckets"

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


def define(platform: Platform, repo: TestRepo, **terraform: Any) -> None:
    platform.create_repository("modules", repo.url)
    state = platform.workdir / "state"
    body = {
        "apiVersion": "agl.burrito-py.io/v1alpha1", "kind": "ApplicationDefinition", "metadata": {"name": "buckets"},
        "spec": {
            "application": {"kind": "Bucket", "plural": PLURAL, "singular": "bucket", "openAPISchema": {
                "type": "object", "required": ["size"],
                "properties": {"size": {"type": "integer", "minimum": 1}, "storagePool": {"type": "string"}}}},
            "backend": {"type": "Terraform", "terraform": {
                "repository": {"name": "modules"}, "branch": "main", "path": "buckets", "prefix": "bucket-",
                "overrideRunnerSpec": {"extraInitArgs": [f"-backend-config=path={state}/{{{{ layer }}}}.tfstate"]},
                **terraform}},
        },
    }
    state.mkdir(parents=True, exist_ok=True)
    platform.custom.create_cluster_custom_object("agl.burrito-py.io", "v1alpha1", "applicationdefinitions", body)
    wait_for(lambda: _condition(platform.custom.get_cluster_custom_object(
        "agl.burrito-py.io", "v1alpha1", "applicationdefinitions", "buckets"), "Ready").get("status") == "True",
        30, interval=0.1, what="definition served")


def _condition(body: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (body.get("status") or {}).get("conditions") or () if c["type"] == kind), {})


def create_bucket(platform: Platform, name: str, **spec: Any) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Bucket", "metadata": {"name": name}, "spec": spec}
    platform.custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)


def bucket(platform: Platform, name: str) -> dict[str, Any]:
    return platform.custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)


def wait_bucket(platform: Platform, name: str, kind: str, status: str, reason: str | None = None,
                timeout: float = 90) -> dict[str, Any]:
    def met() -> dict[str, Any] | None:
        c = _condition(bucket(platform, name), kind)
        return c if c.get("status") == status and (reason is None or c.get("reason") == reason) else None

    try:
        return wait_for(met, timeout, interval=0.1, what=f"bucket {name} {kind}={status} {reason or ''}")
    except AssertionError:
        raise AssertionError(f"bucket {name}: status={bucket(platform, name).get('status')}") from None


def kubectl(platform: Platform, *args: str) -> str:
    done = subprocess.run(["kubectl", "--kubeconfig", str(platform.kubeconfig), *args], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def secret_values(platform: Platform, name: str) -> dict[str, str]:
    data = platform.core.read_namespaced_secret(name, "default").data or {}
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def layer_exists(platform: Platform, name: str) -> bool:
    items = platform.custom.list_namespaced_custom_object(ann.GROUP, ann.VERSION, "default", "terraformlayers")
    return any(item["metadata"]["name"] == name for item in items["items"])


def test_a_auto_approved_instance_is_applied_ready_with_outputs_in_a_secret(platform: Platform, modules: TestRepo):
    define(platform, modules, approvePlan="auto")
    assert kubectl(platform, "get", PLURAL) == "", "the kind is served (kubectl says 'No resources found' on stderr)"
    create_bucket(platform, "photos", size=3, storagePool="fast")
    layer = wait_for(lambda: layer_exists(platform, "bucket-photos") and platform.layer("bucket-photos"), 30)
    assert layer["spec"]["vars"] == {"size": 3, "storage_pool": "fast"}

    ready = wait_bucket(platform, "photos", "Ready", "True", "Applied")
    assert ready["message"].startswith("Applied: Plan: 1 to add")
    status = bucket(platform, "photos")["status"]
    assert status["lastAppliedRevision"] == modules.head
    assert sorted(status["outputs"]) == ["endpoint", "size"]
    assert secret_values(platform, "bucket-photos-outputs") == {"endpoint": "https://fast.storage.example/3",
                                                                "size": "3"}
    assert [r["spec"]["action"] for r in platform.runs("bucket-photos")] == ["plan", "apply"]
    state = json.loads((platform.workdir / "state" / "bucket-photos.tfstate").read_text())
    assert state["resources"][0]["instances"][0]["attributes"]["input"]["value"] == {"size": 3, "pool": "fast"}

    lines = kubectl(platform, "get", PLURAL).splitlines()
    assert lines[0].split() == ["NAME", "READY", "PENDING", "APPROVAL", "AGE"]
    assert lines[1].split()[:3] == ["photos", "True", "False"]
    assert kubectl(platform, "get", "applicationdefinitions", "buckets", "-o",
                   "jsonpath={.status.instances}") == "1"


def test_b_manual_approval_on_the_instance_and_a_spec_change_voids_it(platform: Platform, modules: TestRepo):
    define(platform, modules)  # approvePlan: manual by default
    create_bucket(platform, "photos", size=3)
    pending = wait_bucket(platform, "photos", "PendingApproval", "True", "PlanAwaitsApproval")
    plan_sum = kubectl(platform, "get", "bucket", "photos", "-o", "jsonpath={.status.pendingPlan.sum}")
    assert plan_sum.startswith("sha256:") and plan_sum in pending["message"]
    assert _condition(bucket(platform, "photos"), "Ready")["reason"] == "WaitingForApproval"

    wrong = "sha256:" + "0" * 64
    kubectl(platform, "annotate", "bucket", "photos", f"{ann.APPROVE_PLAN}={wrong}")
    time.sleep(3)  # a window in which a wrong controller would apply
    assert [r["spec"]["action"] for r in platform.runs("bucket-photos")] == ["plan"]
    assert _condition(bucket(platform, "photos"), "PendingApproval")["status"] == "True"

    kubectl(platform, "annotate", "bucket", "photos", "--overwrite", f"{ann.APPROVE_PLAN}={plan_sum}")
    wait_bucket(platform, "photos", "Ready", "True", "Applied")
    assert platform.layer("bucket-photos")["metadata"]["annotations"][ann.APPLY_SUM] == plan_sum
    assert _condition(bucket(platform, "photos"), "PendingApproval")["status"] == "False"

    # A new spec is planned at once; its plan has another sum, and the old approval does not apply it.
    platform.custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "photos",
                                                   {"spec": {"size": 5}})
    def new_plan_pending() -> str | None:
        found = (bucket(platform, "photos").get("status") or {}).get("pendingPlan", {}).get("sum")
        return found if found and found != plan_sum else None

    new_sum = wait_for(new_plan_pending, 90, interval=0.1, what="the new spec's plan to wait for approval")
    assert platform.layer("bucket-photos")["spec"]["vars"] == {"size": 5}
    time.sleep(3)
    assert [r["spec"]["action"] for r in platform.runs("bucket-photos")].count("apply") == 1
    assert _condition(bucket(platform, "photos"), "Ready")["status"] == "False"
    kubectl(platform, "annotate", "bucket", "photos", "--overwrite", f"{ann.APPROVE_PLAN}={new_sum}")
    wait_bucket(platform, "photos", "Ready", "True", "Applied")
    assert secret_values(platform, "bucket-photos-outputs")["size"] == "5"


def test_c_invalid_instances_are_named_and_get_no_layer(platform: Platform, modules: TestRepo):
    define(platform, modules, approvePlan="auto")
    create_bucket(platform, "typo", size="x")
    create_bucket(platform, "private", size=1, _token="s3cr3t")
    typo = wait_bucket(platform, "typo", "Ready", "False", "Invalid", timeout=30)
    assert typo["message"] == "spec.size: 'x' is not of type 'integer'"
    private = wait_bucket(platform, "private", "Ready", "False", "Invalid", timeout=30)
    assert private["message"] == "spec._token: keys starting with '_' are reserved and are not Terraform variables"

    def warned() -> set[tuple[str, str]]:
        events = platform.core.list_namespaced_event("default").items
        return {(e.involved_object.name, e.reason) for e in events if e.type == "Warning"}

    # The event follows the status write: wait for it rather than read once.
    wait_for(lambda: {("typo", "InvalidSpec"), ("private", "InvalidSpec")} <= warned(), 10, interval=0.1,
             what="InvalidSpec warnings for both instances")
    assert "spec.size" in kubectl(platform, "describe", "bucket", "typo")
    time.sleep(1)
    assert not layer_exists(platform, "bucket-typo") and not layer_exists(platform, "bucket-private")

    # Fixing the spec is enough: the layer follows.
    platform.custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "typo", {"spec": {"size": 2}})
    wait_bucket(platform, "typo", "Ready", "True", "Applied")


def test_d_deleting_an_instance_destroys_then_removes_its_layer(platform: Platform, modules: TestRepo):
    define(platform, modules, approvePlan="auto", destroyResourcesOnDeletion=True)
    create_bucket(platform, "photos", size=3)
    wait_bucket(platform, "photos", "Ready", "True", "Applied")
    state_file = platform.workdir / "state" / "bucket-photos.tfstate"
    assert json.loads(state_file.read_text())["resources"]

    platform.custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "photos")
    wait_for(lambda: not layer_exists(platform, "bucket-photos"), 120, interval=0.2, what="layer destroyed and gone")
    assert json.loads(state_file.read_text())["resources"] == [], "the bucket's resources were destroyed"

    # The definition is released once no bucket remains, and the kind is no longer served.
    platform.custom.delete_cluster_custom_object("agl.burrito-py.io", "v1alpha1", "applicationdefinitions", "buckets")
    wait_for(lambda: not platform.custom.list_cluster_custom_object(
        "agl.burrito-py.io", "v1alpha1", "applicationdefinitions")["items"], 30, what="definition released")
    gone = subprocess.run(["kubectl", "--kubeconfig", str(platform.kubeconfig), "get", PLURAL],
                          capture_output=True, text=True, timeout=60, check=False)
    assert gone.returncode != 0 and "buckets" in gone.stderr
