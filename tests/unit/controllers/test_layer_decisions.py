from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.api.annotations import parse_plan_run
from burrito_py.api.layer import LAYER_STATES
from burrito_py.controllers.layer.decide import (
    NO_CHANGES,
    CreateRun,
    LayerSnapshot,
    PendingPlanView,
    decide_layer,
)
from burrito_py.controllers.layer.plan_gate import PlanGate
from burrito_py.controllers.layer.run_view import RunView
from burrito_py.timeutil import format_time

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
DRIFT = timedelta(minutes=20)


def snap(
    annotations: dict[str, str],
    last: RunView | None = None,
    *,
    last_plan: RunView | None = None,
    last_apply: RunView | None = None,
    auto_apply: bool = False,
) -> LayerSnapshot:
    return LayerSnapshot(annotations, last, last_plan, last_apply, auto_apply, DRIFT, gate=reviewed(annotations))


def reviewed(annotations: dict[str, str]) -> PlanGate | None:
    """The controllers' review of the current plan: no policy, nothing known of drift (these tests are not
    about the gate: tests/unit/controllers/test_plan_gate.py is)."""
    plan_sum = annotations.get(ann.PLAN_SUM)
    return PlanGate(plan_sum) if plan_sum else None


def planned(
    commit: str = "c1", *, age: timedelta = timedelta(minutes=1), summary: str | None = None, applied: bool = False
) -> dict[str, str]:
    a = {
        ann.BRANCH_COMMIT: commit,
        ann.RELEVANT_COMMIT: commit,
        ann.RELEVANT_COMMIT_DATE: format_time(NOW - timedelta(hours=1)),
        ann.PLAN_SUM: "sha256:aa",
        ann.PLAN_COMMIT: commit,
        ann.PLAN_DATE: format_time(NOW - age),
        ann.PLAN_RUN: "layer-plan-x/1",
    }
    if summary is not None:
        a[ann.PLAN_SUMMARY] = summary
    if applied:
        a[ann.APPLY_SUM] = "sha256:aa"
    return a


def cond(decision, type_: str) -> bool:  # type: ignore[no-untyped-def]
    return next(c.status for c in decision.conditions if c.type == type_)


def test_layer_waits_for_a_branch_commit():
    d = decide_layer(snap({}), NOW)
    assert d.state is None and d.create_run is None
    assert d.conditions[0].reason == "WaitingForRepository"


def test_new_layer_plans_the_branch_commit():
    d = decide_layer(snap({ann.BRANCH_COMMIT: "c1", ann.RELEVANT_COMMIT: "c1"}), NOW)
    assert d.state == "PlanNeeded"
    assert d.create_run is not None and d.create_run.action == "plan" and d.create_run.revision == "c1"


def test_fresh_plan_without_auto_apply_stays_apply_needed_and_creates_nothing():
    d = decide_layer(snap(planned()), NOW)
    assert d.state == "ApplyNeeded" and d.create_run is None


def test_fresh_plan_with_auto_apply_applies_exactly_that_plan():
    d = decide_layer(snap(planned(), auto_apply=True), NOW)
    assert d.state == "ApplyNeeded"
    assert d.create_run is not None
    assert (d.create_run.action, d.create_run.revision) == ("apply", "c1")
    assert (d.create_run.artifact_run, d.create_run.artifact_attempt) == ("layer-plan-x", 1)


def test_applied_plan_is_idle():
    d = decide_layer(snap(planned(applied=True), auto_apply=True), NOW)
    assert d.state == "Idle" and d.create_run is None


def test_plan_with_no_changes_needs_no_apply():
    d = decide_layer(snap(planned(summary=NO_CHANGES), auto_apply=True), NOW)
    assert d.state == "Idle"


def test_drift_period_elapsed_plans_again():
    d = decide_layer(snap(planned(applied=True, age=DRIFT + timedelta(seconds=1))), NOW)
    assert d.state == "PlanNeeded" and not cond(d, "IsPlanArtifactUpToDate")


def test_new_relevant_commit_plans_it_and_unrelated_commit_does_not():
    relevant = planned(applied=True) | {
        ann.BRANCH_COMMIT: "c2",
        ann.RELEVANT_COMMIT: "c2",
        ann.RELEVANT_COMMIT_DATE: format_time(NOW),
    }
    d = decide_layer(snap(relevant), NOW)
    assert d.state == "PlanNeeded" and d.create_run is not None and d.create_run.revision == "c2"
    unrelated = planned(applied=True) | {ann.BRANCH_COMMIT: "c2"}
    assert decide_layer(snap(unrelated), NOW).state == "Idle"


def test_running_wins_over_everything():
    a = planned() | {ann.SYNC_NOW: format_time(NOW)}
    d = decide_layer(snap(a, RunView("r", "plan", "Running", "c1")), NOW)
    assert d.state == "Running" and d.create_run is None and not d.remove_sync_now


def test_sync_now_plans_and_is_removed():
    a = planned(applied=True) | {ann.SYNC_NOW: format_time(NOW)}
    d = decide_layer(snap(a), NOW)
    assert d.state == "PlanNeeded" and d.remove_sync_now and d.create_run is not None


def test_exhausted_plan_on_current_commit_is_max_retries_reached_until_a_new_commit():
    failed = RunView("r", "plan", "Failed", "c1", message="syntax error")
    a = {ann.BRANCH_COMMIT: "c1", ann.RELEVANT_COMMIT: "c1"}
    d = decide_layer(snap(a, failed, last_plan=failed), NOW)
    assert d.state == "MaxRetriesReached" and d.create_run is None
    assert "syntax error" in next(c.message for c in d.conditions if c.type == "HasLastRunReachedRetryLimit")
    fixed = a | {ann.BRANCH_COMMIT: "c2", ann.RELEVANT_COMMIT: "c2"}
    d = decide_layer(snap(fixed, failed, last_plan=failed), NOW)
    assert d.state == "PlanNeeded" and d.create_run is not None and d.create_run.revision == "c2"


def test_exhausted_apply_is_max_retries_reached():
    failed = RunView("a", "apply", "Failed", "c1", plan_sum="sha256:aa")
    d = decide_layer(snap(planned(), failed, last_apply=failed, auto_apply=True), NOW)
    assert d.state == "MaxRetriesReached" and d.create_run is None
    # A run made before the plan's sum was stamped on it is matched by the plan run it applied.
    legacy = RunView("a", "apply", "Failed", "c1", artifact="layer-plan-x")
    d = decide_layer(snap(planned(), legacy, last_apply=legacy, auto_apply=True), NOW)
    assert d.state == "MaxRetriesReached" and d.create_run is None


def test_parse_plan_run():
    assert parse_plan_run("run-a/2") == ("run-a", 2)
    assert parse_plan_run("run-a") is None
    assert parse_plan_run("run-a/x") is None
    assert parse_plan_run(None) is None


commits = st.sampled_from(["c1", "c2", "c3"])
run_states = st.sampled_from([None, "Initial", "Running", "Retrying", "FailureGracePeriod", "Succeeded", "Failed"])
runs = st.builds(
    RunView, name=st.just("r"), action=st.sampled_from(["plan", "apply"]), state=run_states, revision=commits
)


@st.composite
def snapshots(draw: st.DrawFn) -> LayerSnapshot:
    a: dict[str, str] = {}
    for key, values in [
        (ann.BRANCH_COMMIT, commits),
        (ann.RELEVANT_COMMIT, commits),
        (ann.PLAN_COMMIT, commits),
        (ann.PLAN_SUM, st.sampled_from(["sha256:aa", "sha256:bb"])),
        (ann.APPLY_SUM, st.sampled_from(["sha256:aa", "sha256:bb"])),
        (ann.PLAN_DATE, st.integers(0, 3600).map(lambda s: format_time(NOW - timedelta(seconds=s)))),
        (ann.RELEVANT_COMMIT_DATE, st.integers(0, 3600).map(lambda s: format_time(NOW - timedelta(seconds=s)))),
        (ann.PLAN_RUN, st.just("p/1")),
        (ann.SYNC_NOW, st.just("x")),
        (ann.PLAN_SUMMARY, st.sampled_from([NO_CHANGES, "Plan: 1 to add, 0 to change, 0 to destroy"])),
        (ann.APPROVE_PLAN, st.sampled_from(["sha256:aa", "sha256:bb", "sha256:a", " sha256:aa", "yes"])),
    ]:
        if draw(st.booleans()):
            a[key] = draw(values)
    last_plan = draw(st.none() | runs.filter(lambda r: r.action == "plan"))
    last_apply = draw(st.none() | runs.filter(lambda r: r.action == "apply"))
    last = draw(st.sampled_from([last_plan, last_apply]))
    live = [r for r in (last_plan, last_apply) if r is not None and not r.terminal]
    active = live[0] if live else None
    return LayerSnapshot(a, last, last_plan, last_apply, draw(st.booleans()), DRIFT, active, gate=reviewed(a))


@given(snapshots())
def test_state_is_always_declared_and_only_acts_when_it_should(s: LayerSnapshot):
    d = decide_layer(s, NOW)
    assert d.state in (*LAYER_STATES, None)
    if d.create_run is not None:
        assert d.state in ("PlanNeeded", "ApplyNeeded")
        if d.create_run.action == "apply":
            assert s.auto_apply or s.annotations.get(ann.APPROVE_PLAN) == s.annotations.get(ann.PLAN_SUM)


@given(snapshots())
def test_never_a_second_run_while_one_is_live(s: LayerSnapshot):
    d = decide_layer(s, NOW)
    if s.active_run is not None and ann.BRANCH_COMMIT in s.annotations:
        assert d.state == "Running" and d.create_run is None


@given(snapshots())
def test_never_apply_needed_after_a_failed_plan(s: LayerSnapshot):
    d = decide_layer(s, NOW)
    if (s.last_plan_run is not None and s.last_plan_run.failed) or ann.PLAN_SUM not in s.annotations:
        assert d.state != "ApplyNeeded"


@given(snapshots())
def test_sync_now_always_plans_unless_running(s: LayerSnapshot):
    d = decide_layer(s, NOW)
    if ann.SYNC_NOW in s.annotations and ann.BRANCH_COMMIT in s.annotations:
        running = s.active_run is not None or (s.last_run is not None and not s.last_run.terminal)
        assert d.state == ("Running" if running else "PlanNeeded")
        assert d.remove_sync_now == (not running)


# -- manual approval ---------------------------------------------------------------------------------
def approved(sum_: str, **kwargs: object) -> dict[str, str]:
    return planned(**kwargs) | {ann.APPROVE_PLAN: sum_}  # type: ignore[arg-type]


def reason(decision, type_: str) -> str:  # type: ignore[no-untyped-def]
    return next(c.reason for c in decision.conditions if c.type == type_)


def test_manual_plan_waits_with_a_pending_plan_and_says_how_to_approve_it():
    d = decide_layer(snap(planned()), NOW)
    assert d.state == "ApplyNeeded" and d.create_run is None and not d.remove_approval
    assert d.pending_plan == PendingPlanView("sha256:aa", "layer-plan-x/1", "c1")
    assert reason(d, "IsPlanApproved") == "WaitingForApproval"
    assert f"{ann.APPROVE_PLAN}=sha256:aa" in next(c.message for c in d.conditions if c.type == "IsPlanApproved")


def test_an_approval_of_the_pending_sum_applies_exactly_that_plan_and_is_consumed():
    d = decide_layer(snap(approved("sha256:aa")), NOW)
    assert d.create_run == CreateRun("apply", "c1", "layer-plan-x", 1, relevant_commit="c1", plan_sum="sha256:aa")
    assert d.remove_approval and reason(d, "IsPlanApproved") == "PlanApproved"


def test_an_approval_of_another_sum_applies_nothing_and_says_so():
    d = decide_layer(snap(approved("sha256:bb")), NOW)
    assert d.state == "ApplyNeeded" and d.create_run is None and not d.remove_approval
    assert reason(d, "IsPlanApproved") == "ApprovalMismatch"
    assert d.pending_plan is not None and d.pending_plan.sum == "sha256:aa"


def test_a_newer_plan_invalidates_an_older_approval():
    old = approved("sha256:aa") | {ann.PLAN_SUM: "sha256:new", ann.PLAN_RUN: "layer-plan-y/1"}
    d = decide_layer(snap(old), NOW)
    assert d.create_run is None and d.pending_plan is not None and d.pending_plan.sum == "sha256:new"


def test_an_applied_or_empty_plan_is_not_pending():
    assert decide_layer(snap(planned(applied=True)), NOW).pending_plan is None
    d = decide_layer(snap(approved("sha256:aa", summary=NO_CHANGES)), NOW)
    assert d.pending_plan is None and d.create_run is None and d.state == "Idle"


def test_no_pending_plan_while_the_approved_apply_runs():
    applying = RunView("a", "apply", "Running", "c1")
    d = decide_layer(snap(planned(), applying, last_apply=applying), NOW)
    assert d.state == "Running" and d.pending_plan is None
    assert reason(d, "IsPlanApproved") == "ApplyInProgress"


def test_an_approval_made_while_a_plan_runs_waits_and_never_applies_a_newer_plan():
    running = RunView("p2", "plan", "Running", "c1")
    d = decide_layer(snap(approved("sha256:aa"), running, last_plan=running), NOW)
    assert d.state == "Running" and d.create_run is None and not d.remove_approval


def test_auto_needs_no_approval_and_no_pending_plan():
    d = decide_layer(snap(planned(), auto_apply=True), NOW)
    assert d.pending_plan is None and d.create_run is not None and reason(d, "IsPlanApproved") == "AutoApprove"


def manual(s: LayerSnapshot) -> LayerSnapshot:
    return replace(s, auto_apply=False)


@given(snapshots())
def test_manual_never_applies_without_an_approval_of_exactly_the_current_sum(s: LayerSnapshot):
    s = manual(s)
    d = decide_layer(s, NOW)
    approval, plan_sum = s.annotations.get(ann.APPROVE_PLAN), s.annotations.get(ann.PLAN_SUM)
    if d.create_run is not None and d.create_run.action == "apply":
        assert approval is not None and approval == plan_sum
        assert d.remove_approval
    else:
        assert not d.remove_approval


@given(snapshots(), st.sampled_from(["sha256:other", "", "sha256:AA", "approved"]))
def test_an_approval_of_any_other_value_never_applies(s: LayerSnapshot, other: str):
    s = replace(manual(s), annotations={**s.annotations, ann.APPROVE_PLAN: other})
    d = decide_layer(s, NOW)
    assert not (d.create_run is not None and d.create_run.action == "apply")
    assert not d.remove_approval


@given(snapshots())
def test_the_pending_plan_is_the_unapplied_current_plan_under_manual_only(s: LayerSnapshot):
    d = decide_layer(s, NOW)
    if d.pending_plan is not None:
        assert not s.auto_apply
        assert d.pending_plan.sum == s.annotations[ann.PLAN_SUM] != s.annotations.get(ann.APPLY_SUM)
        assert s.annotations.get(ann.PLAN_SUMMARY) != NO_CHANGES
        assert d.state in ("ApplyNeeded", "PlanNeeded", "Running")
    if d.state == "ApplyNeeded" and not s.auto_apply:
        assert d.pending_plan is not None


@given(snapshots())
def test_under_auto_the_approval_annotation_changes_nothing(s: LayerSnapshot):
    s = replace(s, auto_apply=True)
    without = replace(s, annotations={k: v for k, v in s.annotations.items() if k != ann.APPROVE_PLAN})
    assert decide_layer(s, NOW) == decide_layer(without, NOW)


@given(snapshots())
def test_under_manual_a_matching_approval_changes_only_whether_the_pending_plan_is_applied(s: LayerSnapshot):
    s = manual(s)
    bare = replace(s, annotations={k: v for k, v in s.annotations.items() if k != ann.APPROVE_PLAN})
    d_bare = decide_layer(bare, NOW)
    assert d_bare.create_run is None or d_bare.create_run.action == "plan"
    if ann.PLAN_SUM in s.annotations:
        ok = replace(s, annotations={**bare.annotations, ann.APPROVE_PLAN: s.annotations[ann.PLAN_SUM]})
        d_ok = decide_layer(ok, NOW)
        assert d_ok.state == d_bare.state and d_ok.pending_plan == d_bare.pending_plan
        if d_ok.create_run != d_bare.create_run:
            assert d_bare.state == "ApplyNeeded" and d_ok.create_run is not None
            assert d_ok.create_run.action == "apply" and d_ok.remove_approval
