"""What the AGL writes for an instance: the layer (create, re-align, approval) and the projected status."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from burrito_py.agl.compile import CompiledInstance, compile_instance
from burrito_py.agl.definition import parse_definition
from burrito_py.agl.errors import Invalid
from burrito_py.agl.instance_decisions import LayerWrite, layer_write, project_status, status_patch
from burrito_py.api import annotations as ann
from tests.unit.agl.test_agl_compile import DEFINITION, instance

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
SUM = "sha256:" + "a" * 64


def compiled(**spec: Any) -> CompiledInstance:
    return compile_instance(parse_definition(DEFINITION), instance(**spec))


def served(c: CompiledInstance, annotations: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    """The layer as the API server would hold it, with what the layer controller and runner wrote."""
    layer = copy.deepcopy(c.layer)
    layer["metadata"].update(uid="l-1", resourceVersion="7", annotations=annotations or {},
                             finalizers=["terraform.burrito-py.io/destroy"])
    layer["status"] = status
    return layer


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


# ------------------------------------------------------------------------------------------ layer writes


def test_a_missing_layer_is_created_with_the_instances_approval() -> None:
    c = compiled()
    assert layer_write(c, None, instance(), NOW).create == c.layer
    approving = instance()
    approving["metadata"]["annotations"] = {ann.APPROVE_PLAN: SUM}
    created = layer_write(c, None, approving, NOW).create
    assert created is not None and created["metadata"]["annotations"] == {ann.APPROVE_PLAN: SUM}


def test_the_definitions_plan_policies_follow_it_onto_the_layer() -> None:
    definition = copy.deepcopy(DEFINITION)
    definition["spec"]["backend"]["terraform"]["planPolicies"] = ["no-destroy"]
    with_policies = compile_instance(parse_definition(definition), instance())
    approving = instance()
    approving["metadata"]["annotations"] = {ann.APPROVE_PLAN: SUM}
    created = layer_write(with_policies, None, approving, NOW).create
    assert created is not None and created["metadata"]["annotations"] == {
        ann.LAYER_PLAN_POLICIES: "no-destroy", ann.APPROVE_PLAN: SUM}
    # Added to an existing layer (runner annotations kept), and taken away again with the definition's.
    added = layer_write(with_policies, served(compiled(), {ann.PLAN_SUM: SUM}), instance(), NOW).replace
    assert added is not None and added["metadata"]["annotations"] == {ann.PLAN_SUM: SUM,
                                                                      ann.LAYER_PLAN_POLICIES: "no-destroy"}
    removed = layer_write(compiled(), served(with_policies, {ann.PLAN_SUM: SUM, ann.LAYER_PLAN_POLICIES: "no-destroy"}),
                          instance(), NOW).replace
    assert removed is not None and removed["metadata"]["annotations"] == {ann.PLAN_SUM: SUM}


def test_an_aligned_layer_is_left_alone() -> None:
    c = compiled()
    assert layer_write(c, served(c, {ann.PLAN_SUM: SUM}), instance(), NOW) == LayerWrite()


def test_a_spec_change_replaces_the_spec_keeps_foreign_metadata_and_asks_for_a_plan() -> None:
    old = served(compiled(), {ann.PLAN_SUM: SUM, "team": "x"}, state="ApplyNeeded")
    old["metadata"]["labels"]["extra"] = "kept"
    new = compiled(size=5)
    write = layer_write(new, old, instance(size=5), NOW)
    body = write.replace
    assert body is not None and write.create is None
    assert body["spec"]["vars"] == {"size": 5}
    assert body["metadata"]["annotations"] == {ann.PLAN_SUM: SUM, "team": "x", ann.SYNC_NOW: "2026-01-02T03:04:05Z"}
    assert body["metadata"]["labels"]["extra"] == "kept"
    assert body["metadata"]["finalizers"] == ["terraform.burrito-py.io/destroy"]
    assert body["metadata"]["resourceVersion"] == "7", "the replace is conditional on what we read"
    assert "status" not in body


def test_the_instances_approval_is_copied_to_the_layer_without_a_new_plan() -> None:
    c = compiled()
    approving = instance()
    approving["metadata"]["annotations"] = {ann.APPROVE_PLAN: SUM}
    body = layer_write(c, served(c), approving, NOW).replace
    assert body is not None and body["metadata"]["annotations"] == {ann.APPROVE_PLAN: SUM}
    assert layer_write(c, served(c, {ann.APPROVE_PLAN: SUM}), approving, NOW).replace is None


def test_a_layer_of_someone_else_is_never_touched() -> None:
    c = compiled()
    foreign = served(c)
    foreign["metadata"]["ownerReferences"] = []
    write = layer_write(c, foreign, instance(), NOW)
    assert write.create is None and write.replace is None
    assert write.conflict is not None and "bkt-photos already exists" in write.conflict


# ------------------------------------------------------------------------------------ status projection


def test_invalid_instance() -> None:
    body = instance(size="x")
    status = project_status(body, Invalid("spec.size", "'x' is not of type 'integer'"), None, NOW, "buckets")
    assert conditions(status)["Ready"] == ("False", "Invalid", "spec.size: 'x' is not of type 'integer'")
    assert conditions(status)["PendingApproval"][0] == "False"
    assert "layer" not in status and status["observedGeneration"] == 1


def test_layer_not_created_yet_and_conflict() -> None:
    c = compiled()
    assert conditions(project_status(instance(), c, None, NOW, "buckets"))["Ready"][1] == "Creating"
    status = project_status(instance(), c, served(c), NOW, "buckets", conflict="taken")
    assert conditions(status)["Ready"] == ("False", "LayerConflict", "taken")
    assert "outputs" not in status


def test_applied_layer_is_ready_with_revision_and_outputs() -> None:
    c = compiled()
    layer = served(c, {ann.PLAN_SUM: SUM, ann.APPLY_SUM: SUM, ann.APPLY_COMMIT: "abc123"}, state="Idle",
                   lastResult="Applied: Plan: 1 to add", outputs=["bucket_id", "url"])
    status = project_status(instance(), c, layer, NOW, "buckets")
    assert conditions(status)["Ready"] == ("True", "Applied", "Applied: Plan: 1 to add")
    assert status["lastAppliedRevision"] == "abc123"
    assert status["outputs"] == ["bucket_id", "url"]
    assert (status["layer"], status["outputsSecret"]) == ("bkt-photos", "bucket-photos-outputs")
    assert "pendingPlan" not in status


def test_an_empty_plan_counts_as_applied() -> None:
    c = compiled()
    layer = served(c, {ann.PLAN_SUM: SUM, ann.PLAN_SUMMARY: "No changes."}, state="Idle")
    assert conditions(project_status(instance(), c, layer, NOW, "buckets"))["Ready"][0] == "True"


def test_not_ready_while_the_new_spec_is_not_planned() -> None:
    c = compiled(size=9)
    applied = {ann.PLAN_SUM: SUM, ann.APPLY_SUM: SUM}
    old_spec = served(compiled(), applied, state="Idle")
    assert conditions(project_status(instance(size=9), c, old_spec, NOW, "buckets"))["Ready"][0] == "False"
    asked = served(c, {**applied, ann.SYNC_NOW: "now"}, state="Idle")
    assert conditions(project_status(instance(size=9), c, asked, NOW, "buckets"))["Ready"][0] == "False"


def test_pending_plan_asks_for_approval_with_the_command() -> None:
    c = compiled()
    pending = {"sum": SUM, "run": "bkt-photos-plan-x/1", "revision": "abc"}
    layer = served(c, {ann.PLAN_SUM: SUM}, state="Idle", pendingPlan=pending, lastResult="Plan: 1 to add")
    status = project_status(instance(), c, layer, NOW, "buckets")
    assert status["pendingPlan"] == pending
    approval = conditions(status)["PendingApproval"]
    assert approval[:2] == ("True", "PlanAwaitsApproval")
    assert f"kubectl annotate buckets photos {ann.APPROVE_PLAN}={SUM} --overwrite" in approval[2]
    assert conditions(status)["Ready"][:2] == ("False", "WaitingForApproval")

    approving = instance()
    approving["metadata"]["annotations"] = {ann.APPROVE_PLAN: SUM}
    assert conditions(project_status(approving, c, layer, NOW, "buckets"))["PendingApproval"][:2] == (
        "True", "Approved")
    wrong = instance()
    wrong["metadata"]["annotations"] = {ann.APPROVE_PLAN: "sha256:" + "b" * 64}
    assert conditions(project_status(wrong, c, layer, NOW, "buckets"))["PendingApproval"][1] == "PlanAwaitsApproval"


def test_layer_states_map_to_reasons() -> None:
    c = compiled()
    for state, reason in (("Running", "Running"), ("PlanNeeded", "Planning"), (None, "Planning"),
                          ("ApplyNeeded", "ApplyNeeded"), ("MaxRetriesReached", "Failed")):
        layer = served(c, {ann.PLAN_SUM: SUM}, state=state, lastResult="boom")
        assert conditions(project_status(instance(), c, layer, NOW, "buckets"))["Ready"][:2] == ("False", reason)
    invalid = served(c, {}, conditions=[{"type": "Ready", "status": "False", "reason": "RepositoryNotFound",
                                         "message": "spec.repository: missing"}])
    assert conditions(project_status(instance(), c, invalid, NOW, "buckets"))["Ready"] == (
        "False", "RepositoryNotFound", "spec.repository: missing")


def test_transition_times_survive_unchanged_conditions() -> None:
    c = compiled()
    body = instance()
    first = project_status(body, c, None, NOW, "buckets")
    body["status"] = first
    later = project_status(body, c, None, NOW.replace(hour=9), "buckets")
    assert later == first
    assert status_patch(first, later) is None


def test_status_patch_nulls_what_goes_away_and_recurses() -> None:
    current = {"pendingPlan": {"sum": "a", "run": "r", "revision": "x"}, "layer": "l", "outputs": ["a"]}
    desired = {"pendingPlan": {"sum": "b", "run": "r"}, "layer": "l", "outputs": []}
    assert status_patch(current, desired) == {"pendingPlan": {"sum": "b", "revision": None}, "outputs": []}
    assert status_patch(current, {"layer": "l"}) == {"pendingPlan": None, "outputs": None}
    assert status_patch(None, {"layer": "l"}) == {"layer": "l"}


def test_a_run_that_cannot_start_shows_on_the_instance() -> None:
    """Issue 11 item 9: a refused runner pod (e.g. no runner ServiceAccount in the tenant namespace) is shown,
    not hidden behind `Running`."""
    c = compiled()
    result = "Plan cannot start: could not create runner pod p-1: 403 Forbidden: serviceaccount missing"
    layer = served(c, {}, state="Running", lastResult=result)
    assert conditions(project_status(instance(), c, layer, NOW, "buckets"))["Ready"] == (
        "False", "RunCannotStart", result)
