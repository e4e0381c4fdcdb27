"""Issue 14, end to end with real terraform: layers A ← B ← C (`spec.dependsOn` with inputs).

One commit: applied in order A, B, C, with B's variable holding A's output and C's holding B's. A consumed output
of A changes: exactly one more plan of B (and of C, whose consumed output of B changes with it). An unconsumed
output of A changes: no run of B. A under manual approval: B never applies first. Deleting the three together with
destroyResourcesOnDeletion destroys C, B, A in that order and leaves no layer behind."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from burrito_py.api import annotations as ann
from burrito_py.kube.inventory import creation_order
from tests.support.emulator import wait_for
from tests.support.git_repos import TestRepo, make_repo
from tests.support.real_cluster import RealCluster

from .conftest import Platform, running_platform

NETWORK_TF = """
terraform {
  backend "local" {}
}
resource "terraform_data" "vpc" {
  input = "@VPC@"
}
output "vpc_id" {
  value = terraform_data.vpc.output
}
output "note" {
  value = "@NOTE@"
}
"""
CLUSTER_TF = """
terraform {
  backend "local" {}
}
variable "vpc_id" {
  type = string
}
resource "terraform_data" "subnet" {
  input = "${var.vpc_id}/subnet@EXTRA@"
}
output "subnet_id" {
  value = terraform_data.subnet.output
}
"""
APP_TF = """
terraform {
  backend "local" {}
}
variable "subnet_id" {
  type = string
}
resource "terraform_data" "app" {
  input = "app in ${var.subnet_id}"
}
"""


def network(vpc: str = "vpc-1", note: str = "n1") -> str:
    return NETWORK_TF.replace("@VPC@", vpc).replace("@NOTE@", note)


def cluster(extra: str = "") -> str:
    return CLUSTER_TF.replace("@EXTRA@", extra)


@pytest.fixture
def world(tmp_path: Path, real_cluster: RealCluster) -> Iterator[tuple[Platform, TestRepo]]:
    repo = make_repo(tmp_path / "upstream")
    repo.commit({"layers/a/main.tf": network(), "layers/b/main.tf": cluster(), "layers/c/main.tf": APP_TF},
                "a network, a cluster on it, an app on that")
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", cluster=real_cluster) as platform:
        platform.create_repository("infra", repo.url)
        yield platform, repo


def create_stack(platform: Platform, *, manual_a: bool = False) -> None:
    destroy = {"destroyResourcesOnDeletion": True}
    # Created dependents first: they wait quietly for upstreams that do not exist yet.
    platform.create_layer("c", "infra", "layers/c", auto_apply=True, **destroy,
                          dependsOn=[{"name": "b", "inputs": {"subnet_id": "subnet_id"}}])
    platform.create_layer("b", "infra", "layers/b", auto_apply=True, **destroy,
                          dependsOn=[{"name": "a", "inputs": {"vpc_id": "vpc_id"}}])
    platform.create_layer("a", "infra", "layers/a", auto_apply=True, **destroy,
                          **({"approvePlan": "manual"} if manual_a else {}))


def runs_of(platform: Platform, layer: str, action: str) -> list[dict[str, Any]]:
    return [r for r in platform.runs(layer) if r["spec"]["action"] == action and not r["spec"].get("destroy")]


def resource_input(platform: Platform, layer: str, name: str) -> str:
    try:
        state = json.loads(platform.state_file(layer).read_text())
    except json.JSONDecodeError:  # terraform's local backend is writing it (not atomically): not there yet
        return ""
    resource = next(r for r in state["resources"] if r["name"] == name)
    return str(resource["instances"][0]["attributes"]["input"]["value"])


def created(run: dict[str, Any]) -> str:
    return run["metadata"]["annotations"][ann.RUN_CREATED_AT]


def finished(run: dict[str, Any]) -> str:
    return max(a.get("finishedAt") or "" for a in run["status"]["attempts"])


def explain(platform: Platform) -> str:
    """The stack as it stands, for a failure's message."""
    lines = []
    for layer in ("a", "b", "c"):
        try:
            body = platform.layer(layer)
        except ApiException:  # deleted already
            continue
        status = body.get("status") or {}
        conditions = {c["type"]: (c["status"], c.get("reason"), c.get("message")) for c in status.get("conditions")
                      or () if c["status"] != "True" or c["type"] == "DependenciesSatisfied"}
        lines.append(f"{layer}: {status.get('state')} applied={status.get('appliedRevision')} "
                     f"digest={status.get('inputsDigest')} deps={status.get('dependencies')} {conditions} "
                     f"annotations={body['metadata'].get('annotations')}")
        lines.append(f"  runs={[platform._run_summary(r) for r in platform.runs(layer)]}")
    return "\n".join(lines)


def waiting(platform: Platform, predicate: Any, timeout: float, what: str) -> Any:
    try:
        return wait_for(predicate, timeout, interval=0.5, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{explain(platform)}") from None


def settle(platform: Platform, *layers: str, timeout: float = 150.0) -> None:
    for layer in layers:
        platform.wait_state(layer, "Idle", timeout)


def assert_applied_in_order(platform: Platform, order: list[str], index: int) -> None:
    """The `index`-th apply of each layer was created after the previous layer's finished."""
    applies = [runs_of(platform, layer, "apply")[index] for layer in order]
    for before, after in itertools.pairwise(applies):
        assert created(after) >= finished(before)[:19], (before["metadata"]["name"], after["metadata"]["name"])


def test_a_stack_applies_in_order_and_passes_outputs(world: tuple[Platform, TestRepo]) -> None:
    platform, repo = world
    create_stack(platform)
    settle(platform, "a", "b", "c")
    assert_applied_in_order(platform, ["a", "b", "c"], 0)
    assert resource_input(platform, "b", "subnet") == "vpc-1/subnet"
    assert resource_input(platform, "c", "app") == "app in vpc-1/subnet"

    b = platform.layer("b")["status"]
    assert b["dependencies"] == [{"name": f"{platform.namespace}/a", "state": "Idle", "satisfied": True,
                                  "reason": "Satisfied", "message": "",
                                  "appliedRevision": platform.layer("a")["status"]["appliedRevision"]}]
    assert b["inputsDigest"].startswith("sha256:")
    assert next(c for c in b["conditions"] if c["type"] == "DependenciesSatisfied")["status"] == "True"
    # No value in any status: the digest only.
    for layer in ("a", "b", "c"):
        assert "vpc-1" not in json.dumps(platform.layer(layer)["status"])

    # A consumed output of A changes: one more plan of B, and of C (B's subnet_id changes with it).
    plans = {layer: len(runs_of(platform, layer, "plan")) for layer in "bc"}
    repo.commit({"layers/a/main.tf": network(vpc="vpc-2")}, "a new vpc")
    waiting(platform, lambda: resource_input(platform, "c", "app") == "app in vpc-2/subnet", 60,
            "the app to be on the new vpc's subnet")
    settle(platform, "a", "b", "c")
    assert {layer: len(runs_of(platform, layer, "plan")) - plans[layer] for layer in "bc"} == {"b": 1, "c": 1}
    assert_applied_in_order(platform, ["a", "b", "c"], 1)

    # An unconsumed output changes: A applies, B and C get no run.
    runs = {layer: len(platform.runs(layer)) for layer in "bc"}
    a_applies = len(runs_of(platform, "a", "apply"))
    repo.commit({"layers/a/main.tf": network(vpc="vpc-2", note="n2")}, "a new note")
    wait_for(lambda: len(runs_of(platform, "a", "apply")) > a_applies, 90, what="A's apply of the new note")
    settle(platform, "a")
    time.sleep(3)  # room for a wrong plan of B to be created
    assert {layer: len(platform.runs(layer)) for layer in "bc"} == runs

    # Deleting the three together: destroyed leaves first, and nothing is left behind.
    for layer in ("a", "b", "c"):
        platform.custom.delete_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers",
                                                        layer)
    destroyed: dict[str, str] = {}

    def gone() -> bool:
        names = {item["metadata"]["name"] for item in platform.custom.list_namespaced_custom_object(
            ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers")["items"]}
        for run in platform.runs():
            if run["spec"].get("destroy") and run["spec"]["action"] == "apply":
                destroyed.setdefault(run["spec"]["layer"]["name"], created(run))
        return not names

    wait_for(gone, 180, interval=0.2, what="the three layers to be destroyed and deleted")
    assert sorted(destroyed, key=destroyed.__getitem__) == ["c", "b", "a"]
    for layer in ("a", "b", "c"):
        state = json.loads(platform.state_file(layer).read_text())
        assert state["resources"] == [], layer


def test_an_upstream_waiting_for_approval_holds_its_dependent(world: tuple[Platform, TestRepo]) -> None:
    platform, repo = world
    create_stack(platform, manual_a=True)
    plan_sum = wait_for(lambda: (platform.layer("a").get("status") or {}).get("pendingPlan", {}).get("sum"), 90,
                        what="A's first plan to wait for approval")
    time.sleep(3)
    # B cannot even plan: it has no known value for its variable yet (no placeholder is ever used).
    assert runs_of(platform, "b", "plan") == [] and runs_of(platform, "c", "plan") == []
    b = platform.layer("b")["status"]
    assert next(c for c in b["conditions"] if c["type"] == "DependenciesSatisfied")["reason"] == "UpstreamPending"
    platform.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers", "a",
                                                   {"metadata": {"annotations": {ann.APPROVE_PLAN: plan_sum}}})
    settle(platform, "a", "b", "c")

    # A commit touching A and B: B plans at once (with the outputs it knows), and waits for A's approved apply.
    repo.commit({"layers/a/main.tf": network(vpc="vpc-3"), "layers/b/main.tf": cluster(extra="-v2")}, "both")
    def new_pending_plan() -> str | None:
        pending = (platform.layer("a").get("status") or {}).get("pendingPlan") or {}
        return pending.get("sum") if pending.get("revision") == repo.head else None

    plan_sum = waiting(platform, new_pending_plan, 90, "A's new plan to wait for approval")
    waiting(platform, lambda: len(runs_of(platform, "b", "plan")) >= 2 and platform.layer("b")["status"]["state"] ==
            "ApplyNeeded", 90, "B to plan its change and wait")
    time.sleep(3)
    assert len(runs_of(platform, "b", "apply")) == 1  # its first apply only
    b = platform.layer("b")["status"]
    assert next(c for c in b["conditions"] if c["type"] == "DependenciesSatisfied")["reason"] == "UpstreamPending"
    assert b["dependencies"][0]["satisfied"] is False
    platform.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers", "a",
                                                   {"metadata": {"annotations": {ann.APPROVE_PLAN: plan_sum}}})
    settle(platform, "a", "b", "c")
    assert_applied_in_order(platform, ["a", "b"], 1)
    assert resource_input(platform, "b", "subnet") == "vpc-3/subnet-v2"


def test_a_cycle_runs_nothing_and_says_so(world: tuple[Platform, TestRepo]) -> None:
    platform, _ = world
    platform.create_layer("x", "infra", "layers/a", auto_apply=True, dependsOn=[{"name": "y"}])
    platform.create_layer("y", "infra", "layers/a", auto_apply=True, dependsOn=[{"name": "z"}])
    platform.create_layer("z", "infra", "layers/a", auto_apply=True, dependsOn=[{"name": "x"}])

    def cycle_reported() -> bool:
        for layer in "xyz":
            conditions = (platform.layer(layer).get("status") or {}).get("conditions") or ()
            found = next((c for c in conditions if c["type"] == "DependenciesSatisfied"), None)
            if found is None or found["reason"] != "DependencyCycle":
                return False
        return True

    wait_for(cycle_reported, 60, what="every layer of the cycle to report it")
    message = next(c for c in platform.layer("x")["status"]["conditions"] if c["type"] == "DependenciesSatisfied")
    ns = platform.namespace
    assert message["message"] == f"cycle: {ns}/x -> {ns}/y -> {ns}/z -> {ns}/x"
    time.sleep(2)
    assert platform.runs() == []
    # Breaking the cycle lets them run, in order.
    platform.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers", "z",
                                                   {"spec": {"dependsOn": None}})
    settle(platform, "z", "y", "x")
    applies = sorted((r for r in platform.runs() if r["spec"]["action"] == "apply"), key=creation_order)
    assert [r["spec"]["layer"]["name"] for r in applies] == ["z", "y", "x"]


BROKEN_TF = """
terraform {
  backend "local" {}
}
resource "terraform_data" "vpc" {
  input = var.undeclared
}
"""


def test_an_upstream_failure_stops_its_subtree_without_runs(world: tuple[Platform, TestRepo]) -> None:
    platform, repo = world
    repo.commit({"layers/a/main.tf": BROKEN_TF}, "a broken network")
    platform.create_layer("a", "infra", "layers/a", auto_apply=True, remediation={"onError": {"maxRetries": 0}})
    platform.create_layer("b", "infra", "layers/b", auto_apply=True,
                          dependsOn=[{"name": "a", "inputs": {"vpc_id": "vpc_id"}}])
    platform.create_layer("c", "infra", "layers/c", auto_apply=True,
                          dependsOn=[{"name": "b", "inputs": {"subnet_id": "subnet_id"}}])
    platform.wait_state("a", "MaxRetriesReached", 90)

    def reason(layer: str) -> str | None:
        conditions = (platform.layer(layer).get("status") or {}).get("conditions") or ()
        return next((c["reason"] for c in conditions if c["type"] == "DependenciesSatisfied"), None)

    waiting(platform, lambda: reason("b") == "UpstreamFailed" and reason("c") == "UpstreamFailed", 30,
            "the failure to spread to b and c")
    time.sleep(3)
    assert platform.runs("b") == [] and platform.runs("c") == []  # no retry storm: nothing runs below a failure
    assert len(platform.runs("a")) == 1

    # The fix lets the whole stack through, in order.
    repo.commit({"layers/a/main.tf": network()}, "the network fixed")
    settle(platform, "a", "b", "c")
    assert_applied_in_order(platform, ["a", "b", "c"], 0)
