"""TerraformLayer manual plan approval and destroy on deletion, end to end with real terraform and git."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.destroy import DESTROY_FINALIZER
from tests.support.git_repos import TestRepo
from tests.support.real_cluster import RealCluster

from .conftest import Platform, layer_code, running_platform, wait_for

QUIET = 3.0  # seconds in which a wrong controller would have created a run


def state_inputs(platform: Platform, layer: str) -> list[str]:
    path = platform.state_file(layer)
    if not path.exists():
        return []
    return [
        instance["attributes"]["input"]["value"]
        for resource in json.loads(path.read_text()).get("resources", [])
        for instance in resource.get("instances", [])
    ]


def approve(platform: Platform, layer: str, value: str) -> None:
    platform.custom.patch_namespaced_custom_object(
        ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers", layer,
        {"metadata": {"annotations": {ann.APPROVE_PLAN: value}}},
    )


def condition(body: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in body["status"]["conditions"] if c["type"] == type_)


def events_of(platform: Platform, name: str, reason: str, type_: str = "Warning") -> list[str]:
    events = platform.core.list_namespaced_event(platform.namespace, field_selector=f"involvedObject.name={name}").items
    return [e.message for e in events if e.type == type_ and e.reason == reason]


def pending_sum(platform: Platform, layer: str) -> str | None:
    pending = (platform.layer(layer).get("status") or {}).get("pendingPlan") or {}
    return pending.get("sum")


def layer_exists(platform: Platform, name: str) -> bool:
    try:
        platform.layer(name)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def destroy_actions(platform: Platform, layer: str) -> list[str]:
    return [r["spec"]["action"] for r in platform.runs(layer) if r["spec"].get("destroy")]


def delete_layer(platform: Platform, name: str) -> None:
    platform.custom.delete_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers", name)


def test_manual_approval_applies_only_the_plan_whose_sum_is_approved(platform: Platform, repo: TestRepo):
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app", approvePlan="manual")
    layer = platform.wait_state("app", "ApplyNeeded", timeout=60)
    a = layer["metadata"]["annotations"]
    assert layer["status"]["pendingPlan"] == {"sum": a[ann.PLAN_SUM], "run": a[ann.PLAN_RUN], "revision": repo.head}
    assert condition(layer, "IsPlanApproved")["reason"] == "WaitingForApproval"
    plan_sum = a[ann.PLAN_SUM]

    wrong = "sha256:" + "0" * 64
    approve(platform, "app", wrong)
    wait_for(lambda: condition(platform.layer("app"), "IsPlanApproved")["reason"] == "ApprovalMismatch", 10,
             what="the mismatch to be reported")
    wait_for(lambda: any(wrong in m for m in events_of(platform, "app", "ApprovalMismatch")), 10, what="a Warning")
    time.sleep(QUIET)
    assert [r["spec"]["action"] for r in platform.runs("app")] == ["plan"]
    layer = platform.layer("app")
    assert layer["status"]["state"] == "ApplyNeeded" and layer["status"]["pendingPlan"]["sum"] == plan_sum
    assert layer["metadata"]["annotations"][ann.APPROVE_PLAN] == wrong, "a wrong approval is left for its author"
    assert state_inputs(platform, "app") == []

    approve(platform, "app", plan_sum)
    layer = platform.wait_state("app", "Idle", timeout=60)
    assert "pendingPlan" not in layer["status"]
    assert ann.APPROVE_PLAN not in layer["metadata"]["annotations"], "the approval is consumed by its apply"
    assert layer["metadata"]["annotations"][ann.APPLY_SUM] == plan_sum
    runs = platform.runs("app")
    assert [r["spec"]["action"] for r in runs] == ["plan", "apply"]
    assert runs[1]["spec"]["artifact"]["run"] == a[ann.PLAN_RUN].split("/")[0]
    assert state_inputs(platform, "app") == ["v1"]


def test_a_new_commit_replaces_the_pending_plan_and_an_approval_of_the_old_one_applies_nothing(
    platform: Platform, repo: TestRepo
):
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app")  # approvePlan unset, autoApply false: manual
    platform.wait_state("app", "ApplyNeeded", timeout=60)
    old_sum = pending_sum(platform, "app")
    assert old_sum

    v2 = repo.commit({"layers/app/main.tf": layer_code("v2")}, "v2")
    wait_for(lambda: platform.annotations("app").get(ann.PLAN_COMMIT) == v2, 60, what="the plan of v2")
    layer = platform.wait_state("app", "ApplyNeeded", timeout=30)
    new_sum = layer["status"]["pendingPlan"]["sum"]
    assert new_sum != old_sum and layer["status"]["pendingPlan"]["revision"] == v2

    approve(platform, "app", old_sum)  # someone approves the plan they reviewed before the commit
    time.sleep(QUIET)
    assert [r["spec"]["action"] for r in platform.runs("app")] == ["plan", "plan"]
    assert condition(platform.layer("app"), "IsPlanApproved")["reason"] == "ApprovalMismatch"
    assert state_inputs(platform, "app") == []

    approve(platform, "app", new_sum)
    platform.wait_state("app", "Idle", timeout=60)
    assert [r["spec"]["action"] for r in platform.runs("app")] == ["plan", "plan", "apply"]
    assert state_inputs(platform, "app") == ["v2"]


def destroy_runs_until_gone(platform: Platform, layer: str, timeout: float) -> list[tuple[str, str, Any]]:
    """Every destroy run seen (name, action, last state seen), oldest first, while waiting for the layer to
    go. The apply's Succeeded and the layer's removal are a few milliseconds apart, so its last state seen
    may be Running: the `Destroyed` event says how it ended."""
    seen: dict[str, tuple[str, str, Any]] = {}
    deadline = time.monotonic() + timeout
    while layer_exists(platform, layer):
        for run in platform.runs(layer):
            if run["spec"].get("destroy"):
                name = run["metadata"]["name"]
                seen[name] = (name, run["spec"]["action"], (run.get("status") or {}).get("state"))
        assert time.monotonic() < deadline, f"layer {layer} still there; runs {list(seen.values())}"
        time.sleep(0.1)
    return list(seen.values())  # first seen first: runs() lists them in creation order


def assert_destroyed_by(platform: Platform, layer: str, runs: list[tuple[str, str, Any]]) -> None:
    """The last two destroy runs are a plan that succeeded and the apply of it the layer went after."""
    (_, plan_action, plan_state), (apply_name, apply_action, _) = runs[-2:]
    assert (plan_action, plan_state, apply_action) == ("plan", "Succeeded", "apply")
    assert events_of(platform, layer, "Destroyed", "Normal") == [f"destroy apply run {apply_name} succeeded"]


def test_deleting_a_layer_with_destroy_resources_on_deletion_destroys_them_first(
    platform: Platform, repo: TestRepo
):
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app", auto_apply=True, destroyResourcesOnDeletion=True)
    platform.create_layer("other", "repo", "layers/other", auto_apply=True)
    layer = platform.wait_state("app", "Idle", timeout=90)
    platform.wait_state("other", "Idle", timeout=60)
    assert layer["metadata"]["finalizers"] == [DESTROY_FINALIZER]
    assert not platform.layer("other")["metadata"].get("finalizers")
    assert state_inputs(platform, "app") == ["v1"] and state_inputs(platform, "other") == ["other"]

    delete_layer(platform, "other")  # without the flag: gone at once, its resources left alone
    assert not layer_exists(platform, "other") and state_inputs(platform, "other") == ["other"]

    delete_layer(platform, "app")
    runs = destroy_runs_until_gone(platform, "app", timeout=90)
    assert [action for _, action, _ in runs] == ["plan", "apply"]
    assert_destroyed_by(platform, "app", runs)
    assert state_inputs(platform, "app") == []
    state = json.loads(platform.state_file("app").read_text())
    assert state["resources"] == [] and state["outputs"] == {}
    wait_for(lambda: not platform.runs("app"), 10, what="its runs to be garbage collected")


BREAKING_DESTROY = """
terraform {
  backend "local" {}
}

resource "terraform_data" "this" {
  input = "v1"

  provisioner "local-exec" {
    when    = destroy
    command = "%s"
  }
}
"""


def test_a_failed_destroy_keeps_the_layer_until_a_retry_succeeds(tmp_path: Path, repo: TestRepo,
                                                                 real_cluster: RealCluster):
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", max_retries=1, cluster=real_cluster) as platform:
        repo.commit({"layers/app/main.tf": BREAKING_DESTROY % "exit 1"}, "a destroy that fails")
        platform.create_repository("repo", repo.url)
        platform.create_layer("app", "repo", "layers/app", auto_apply=True, destroyResourcesOnDeletion=True)
        platform.wait_state("app", "Idle", timeout=90)
        assert state_inputs(platform, "app") == ["v1"]

        delete_layer(platform, "app")
        layer = platform.wait_state("app", "MaxRetriesReached", timeout=90)
        failed = condition(layer, "HasDestroyFailed")
        assert failed["status"] == "True" and failed["reason"] == "DestroyFailed"
        assert "destroy apply run" in failed["message"] and "local-exec provisioner error" in failed["message"]
        wait_for(lambda: events_of(platform, "app", "DestroyFailed"), 10, what="a DestroyFailed Warning")
        assert layer["metadata"]["deletionTimestamp"] and layer["metadata"]["finalizers"] == [DESTROY_FINALIZER]
        assert destroy_actions(platform, "app") == ["plan", "apply"]
        time.sleep(QUIET)
        assert destroy_actions(platform, "app") == ["plan", "apply"], "no runaway: a failed destroy waits"
        assert state_inputs(platform, "app") == ["v1"]

        # sync-now retries once; nothing is fixed, so it fails again and waits again.
        platform.sync_now("app")
        wait_for(lambda: len(destroy_actions(platform, "app")) == 4
                 and platform.layer("app")["status"]["state"] == "MaxRetriesReached", 90,
                 what="the retried destroy to fail again")
        assert ann.SYNC_NOW not in platform.annotations("app")
        time.sleep(QUIET)
        assert destroy_actions(platform, "app") == ["plan", "apply", "plan", "apply"]

        # A fixing commit: its destroy plan and apply succeed, and the layer goes.
        repo.commit({"layers/app/main.tf": BREAKING_DESTROY % "exit 0"}, "fix the destroy")
        runs = destroy_runs_until_gone(platform, "app", timeout=90)
        assert_destroyed_by(platform, "app", runs)
        assert state_inputs(platform, "app") == []
