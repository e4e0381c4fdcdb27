"""Layer decisions under the faults of issue 11: commits with old committer dates, stale applies, exhaustion
that outlives run-history cleanup, unrelated commits, sync windows, empty annotations, run names."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.actions import snapshot
from burrito_py.controllers.layer.decide import (
    CreateRun,
    Exhaustion,
    LayerDecision,
    LayerSnapshot,
    decide_layer,
)
from burrito_py.controllers.layer.plan_gate import PlanGate
from burrito_py.controllers.layer.run_view import RunView
from burrito_py.controllers.layer.runs import run_name
from burrito_py.controllers.layer.status import compute_status
from burrito_py.controllers.layer.sync_windows import Window
from burrito_py.kube.conditions import Cond
from burrito_py.timeutil import format_time

NOW = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)  # a Monday
DRIFT = timedelta(minutes=20)
PLAN_RUN = "app-plan-1"


def layer(
    *,
    branch: str = "c1",
    relevant: str = "c1",
    plan_commit: str | None = "c1",
    plan_sum: str | None = "sha256:aa",
    plan_age: timedelta = timedelta(minutes=1),
    applied: str | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    a = {ann.BRANCH_COMMIT: branch, ann.RELEVANT_COMMIT: relevant}
    if plan_sum is not None:
        a |= {ann.PLAN_SUM: plan_sum, ann.PLAN_DATE: format_time(NOW - plan_age), ann.PLAN_RUN: f"{PLAN_RUN}/1"}
    if plan_commit is not None:
        a[ann.PLAN_COMMIT] = plan_commit
    if applied is not None:
        a[ann.APPLY_SUM] = applied
    return a | (extra or {})


def snap(
    annotations: dict[str, str],
    runs: list[RunView] = (),  # type: ignore[assignment]
    *,
    exhausted_plan: Exhaustion | None = None,
    exhausted_apply: Exhaustion | None = None,
    windows: tuple[Window, ...] = (),
    auto_apply: bool = True,
) -> LayerSnapshot:
    """`runs` newest first, as the inventory gives them."""
    return LayerSnapshot(
        annotations,
        runs[0] if runs else None,
        next((r for r in runs if r.action == "plan"), None),
        next((r for r in runs if r.action == "apply"), None),
        auto_apply,
        DRIFT,
        next((r for r in runs if not r.terminal), None),
        plan_run=next((r for r in runs if r.name == PLAN_RUN), None),
        exhausted_plan=exhausted_plan,
        exhausted_apply=exhausted_apply,
        windows=windows,
        layer_name="app",
        gate=PlanGate(annotations[ann.PLAN_SUM]) if annotations.get(ann.PLAN_SUM) else None,
    )


def condition(d: LayerDecision, type_: str) -> Cond:
    return next(c for c in d.conditions if c.type == type_)


# -- 1. planned is decided on revisions, never on committer dates -------------------------------------------
def test_a_new_relevant_commit_with_an_old_committer_date_is_planned():
    """Issue 11 item 1: a commit made an hour ago, pushed after a sync-now plan ran, is still planned."""
    a = layer(branch="c2", relevant="c2", applied="sha256:aa", extra={
        ann.RELEVANT_COMMIT_DATE: format_time(NOW - timedelta(hours=1)),  # older than the plan
    })
    d = decide_layer(snap(a), NOW)
    assert d.state == "PlanNeeded" and d.create_run is not None and d.create_run.revision == "c2"
    assert not condition(d, "IsLastRelevantCommitPlanned").status


@given(st.integers(-7200, 7200))
def test_whatever_the_committer_date_a_relevant_commit_not_planned_is_planned(offset: int):
    a = layer(branch="c3", relevant="c3", applied="sha256:aa", extra={
        ann.RELEVANT_COMMIT_DATE: format_time(NOW + timedelta(seconds=offset)),
    })
    d = decide_layer(snap(a), NOW)
    assert d.state == "PlanNeeded" and d.create_run == CreateRun("plan", "c3", relevant_commit="c3")


def test_a_plan_made_at_an_unrelated_head_counts_for_its_relevant_commit():
    """The plan ran at c2 (an unrelated head; relevant commit c1, stamped on its run); c3 is unrelated too."""
    plan = RunView(PLAN_RUN, "plan", "Succeeded", "c2", relevant_commit="c1")
    a = layer(branch="c3", relevant="c1", plan_commit="c2", applied="sha256:aa")
    d = decide_layer(snap(a, [plan]), NOW)
    assert d.state == "Idle" and d.create_run is None
    # Without the stamp (a run made before it existed) the layer plans once more, at the head: never skips.
    legacy = RunView(PLAN_RUN, "plan", "Succeeded", "c2")
    assert decide_layer(snap(a, [legacy]), NOW).state == "PlanNeeded"


def test_plan_runs_record_the_relevant_commit_they_were_made_for():
    d = decide_layer(snap(layer(branch="c5", relevant="c4", plan_sum=None, plan_commit=None)), NOW)
    assert d.create_run == CreateRun("plan", "c5", relevant_commit="c4")


# -- 2. a stale apply re-plans at once, within bounds; a new sum lifts an apply's exhaustion ----------------
def stale_apply(name: str, plan_sum: str, relevant: str = "c1") -> RunView:
    return RunView(name, "apply", "Failed", "c1", message="stale plan: Saved plan is stale", plan_sum=plan_sum,
                   relevant_commit=relevant, reason="StalePlan", artifact=PLAN_RUN)


def test_a_stale_apply_re_plans_at_once_at_the_same_commit():
    runs = [stale_apply("app-apply-1", "sha256:aa"), RunView(PLAN_RUN, "plan", "Succeeded", "c1")]
    d = decide_layer(snap(layer(), runs), NOW)
    assert d.state == "PlanNeeded" and d.create_run == CreateRun("plan", "c1", relevant_commit="c1")
    assert d.exhausted_apply is not None and d.exhausted_apply.reason == "StalePlan"
    assert d.exhausted_apply.stale_count == 1 and d.exhausted_apply.key == "sha256:aa"


def test_the_plan_after_a_stale_apply_is_applied():
    runs = [RunView("app-plan-2", "plan", "Succeeded", "c1"), stale_apply("app-apply-1", "sha256:aa")]
    recorded = Exhaustion("app-apply-1", "sha256:aa", "StalePlan", "stale", "c1", 1)
    a = layer(plan_sum="sha256:bb", extra={ann.PLAN_RUN: "app-plan-2/1"})
    d = decide_layer(snap(a, runs, exhausted_apply=recorded), NOW)
    assert d.state == "ApplyNeeded" and d.create_run is not None and d.create_run.plan_sum == "sha256:bb"


def test_two_stale_applies_in_a_row_stop_re_planning_until_a_new_sum():
    """The bound: plan → stale apply → plan → stale apply stops; drift, sync-now or a commit plans again."""
    first = Exhaustion("app-apply-1", "sha256:aa", "StalePlan", "stale", "c1", 1)
    runs = [stale_apply("app-apply-2", "sha256:bb"), RunView(PLAN_RUN, "plan", "Succeeded", "c1")]
    d = decide_layer(snap(layer(plan_sum="sha256:bb"), runs, exhausted_apply=first), NOW)
    assert d.state == "MaxRetriesReached" and d.create_run is None
    assert d.exhausted_apply is not None and d.exhausted_apply.stale_count == 2
    assert condition(d, "HasLastRunReachedRetryLimit").reason == "StalePlan"
    # The drift plan has a new sum: it is applied.
    drift = [RunView("app-plan-3", "plan", "Succeeded", "c1"), *runs]
    a = layer(plan_sum="sha256:cc", extra={ann.PLAN_RUN: "app-plan-3/1"})
    d = decide_layer(snap(a, drift, exhausted_apply=d.exhausted_apply), NOW)
    assert d.state == "ApplyNeeded" and d.create_run is not None and d.create_run.action == "apply"


def test_a_newer_plan_with_a_new_sum_lifts_an_exhausted_apply_at_the_same_commit():
    """Issue 11 item 2: a sync-now or drift plan at the same commit is applied after an exhausted apply."""
    failed = RunView("app-apply-1", "apply", "Failed", "c1", message="boom", plan_sum="sha256:aa",
                     relevant_commit="c1")
    runs = [RunView("app-plan-2", "plan", "Succeeded", "c1"), failed]
    a = layer(plan_sum="sha256:bb", extra={ann.PLAN_RUN: "app-plan-2/1"})
    d = decide_layer(snap(a, runs), NOW)
    assert d.state == "ApplyNeeded" and d.create_run is not None and d.create_run.plan_sum == "sha256:bb"
    # ...but the same plan is never applied twice.
    d = decide_layer(snap(layer(), [failed]), NOW)
    assert d.state == "MaxRetriesReached" and d.create_run is None


# -- 3. exhaustion is recorded on the layer, not inferred from runs that cleanup deletes --------------------
def test_an_exhausted_apply_stays_exhausted_once_its_run_is_deleted():
    failed = RunView("app-apply-1", "apply", "Failed", "c1", message="boom", plan_sum="sha256:aa",
                     relevant_commit="c1")
    d = decide_layer(snap(layer(), [failed]), NOW)
    assert d.exhausted_apply is not None
    # Five newer runs later, history cleanup deleted it; only newer plan runs (same sum) are left.
    newer = [RunView(f"app-plan-{i}", "plan", "Succeeded", "c1") for i in range(5)]
    again = decide_layer(snap(layer(), newer, exhausted_apply=d.exhausted_apply), NOW)
    assert again.state == "MaxRetriesReached" and again.create_run is None
    assert again.exhausted_apply == d.exhausted_apply


def test_an_exhausted_plan_stays_exhausted_once_its_run_is_deleted():
    recorded = Exhaustion("app-plan-9", "c1", "RetryLimitReached", "syntax error", "c1")
    d = decide_layer(snap(layer(plan_sum=None, plan_commit=None), exhausted_plan=recorded), NOW)
    assert d.state == "MaxRetriesReached" and d.create_run is None
    assert "syntax error" in condition(d, "HasLastRunReachedRetryLimit").message


def test_a_successful_apply_clears_the_record():
    recorded = Exhaustion("app-apply-1", "sha256:aa", "RetryLimitReached", "boom", "c1")
    ok = RunView("app-apply-2", "apply", "Succeeded", "c1", plan_sum="sha256:bb")
    d = decide_layer(snap(layer(plan_sum="sha256:bb", applied="sha256:bb"), [ok], exhausted_apply=recorded), NOW)
    assert d.exhausted_apply is None and d.state == "Idle"


def test_the_status_holds_the_record_and_the_snapshot_reads_it_back():
    failed = RunView("app-apply-1", "apply", "Failed", "c1", message="boom", plan_sum="sha256:aa",
                     relevant_commit="c1")
    d = decide_layer(snap(layer(), [failed]), NOW)
    body = {"metadata": {"name": "app", "namespace": "default", "annotations": layer()}, "status": {}}
    status = compute_status(body, d, Cond("Ready", True, "Ready"), [], NOW)
    assert status["exhaustedApply"] == {"run": "app-apply-1", "key": "sha256:aa", "reason": "RetryLimitReached",
                                        "message": "boom", "relevantCommit": "c1"}
    restored = snapshot(body | {"status": status}, [], True, DRIFT)
    assert restored.exhausted_apply == d.exhausted_apply


# -- 5. plan exhaustion is keyed on the relevant commit ------------------------------------------------------
def test_an_unrelated_commit_does_not_re_run_a_broken_layer():
    failed = RunView("app-plan-1", "plan", "Failed", "c1", message="syntax error", relevant_commit="c1")
    d = decide_layer(snap(layer(branch="c2", relevant="c1", plan_sum=None, plan_commit=None), [failed]), NOW)
    assert d.state == "MaxRetriesReached" and d.create_run is None
    fixed = decide_layer(snap(layer(branch="c3", relevant="c3", plan_sum=None, plan_commit=None), [failed]), NOW)
    assert fixed.state == "PlanNeeded" and fixed.create_run is not None and fixed.create_run.revision == "c3"


# -- 6. sync windows are decided before a run exists ---------------------------------------------------------
DENY_NOW = Window("deny", "0 9 * * *", "2h")  # 09:00-11:00 UTC every day
NEVER = "0 0 30 2 *"  # February 30th: burrito's way of saying "never"


def test_a_deny_window_holds_the_plan_back_visibly_and_wakes_at_its_end():
    a = layer(plan_sum=None, plan_commit=None, extra={ann.SYNC_NOW: "x"})
    d = decide_layer(snap(a, windows=(DENY_NOW,)), NOW)
    assert d.state == "PlanNeeded" and d.create_run is None and not d.remove_sync_now
    cond = condition(d, "IsInSyncWindow")
    assert not cond.status and cond.reason == "SyncWindowDenied" and "'0 9 * * *'" in cond.message
    assert d.wake_at == NOW.replace(hour=11)


def test_a_deny_window_for_apply_only_lets_the_plan_run():
    window = Window("deny", "0 9 * * *", "2h", actions=("apply",))
    assert decide_layer(snap(layer(plan_sum=None, plan_commit=None), windows=(window,)), NOW).create_run is not None
    d = decide_layer(snap(layer(), windows=(window,)), NOW)
    assert d.state == "ApplyNeeded" and d.create_run is None


def test_a_window_that_never_fires_is_never_active_and_never_an_error():
    deny = Window("deny", NEVER, "1h")
    d = decide_layer(snap(layer(plan_sum=None, plan_commit=None), windows=(deny,)), NOW)
    assert d.create_run is not None and condition(d, "IsInSyncWindow").status
    allow = Window("allow", NEVER, "1h")
    d = decide_layer(snap(layer(plan_sum=None, plan_commit=None), windows=(allow,)), NOW)
    cond = condition(d, "IsInSyncWindow")
    assert d.create_run is None and cond.reason == "OutsideSyncWindow" and d.wake_at is None


def test_when_the_window_opens_an_old_plan_is_planned_again_not_applied():
    """The plan was made before the window and has aged past the drift period: never apply it."""
    a = layer(plan_age=DRIFT + timedelta(minutes=5))
    d = decide_layer(snap(a), NOW)
    assert d.state == "PlanNeeded" and d.create_run is not None and d.create_run.action == "plan"


# -- 7. an empty plan-sum means "no plan" ---------------------------------------------------------------------
def test_an_empty_plan_sum_is_no_plan_for_the_decision_and_the_status():
    a = layer(plan_sum="")
    d = decide_layer(snap(a), NOW)
    assert d.state == "PlanNeeded" and d.create_run is not None and d.create_run.action == "plan"
    assert condition(d, "HasLastPlanFailed").reason == "NoPlanYet"
    assert condition(d, "IsApplyUpToDate").reason == "NothingToApply"
    body = {"metadata": {"name": "app", "namespace": "default", "annotations": a}, "status": {}}
    assert "lastPlan" not in compute_status(body, d, Cond("Ready", True, "Ready"), [], NOW)


# -- 13. one decision, one run name ---------------------------------------------------------------------------
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def body_of(name: str, uid: str = "u1") -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "default", "uid": uid}}


def test_a_decision_repeated_gets_the_same_name_and_the_next_decision_another():
    plan = CreateRun("plan", "c1", relevant_commit="c1")
    first = run_name(body_of("app"), plan, "app-plan-0", None)
    assert run_name(body_of("app"), plan, "app-plan-0", None) == first
    # Once created, the run is the newest: a drift plan at the same revision gets a new name.
    assert run_name(body_of("app"), plan, first, None) != first
    assert run_name(body_of("app"), plan, "app-plan-0", "2026-11-23T10:00:00Z") != first
    assert run_name(body_of("app", uid="u2"), plan, "app-plan-0", None) != first
    apply = CreateRun("apply", "c1", "p", 1, plan_sum="sha256:aa")
    assert run_name(body_of("app"), apply, "app-plan-0", None) != first


SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@given(st.from_regex(SUBDOMAIN, fullmatch=True).filter(lambda s: len(s) <= 253) | st.just("a" * 253))
def test_run_names_are_valid_label_values_whatever_the_layer_name(layer_name: str):
    for action in ("plan", "apply"):
        name = run_name(body_of(layer_name), CreateRun(action, "c1"), None, None)  # type: ignore[arg-type]
        assert len(name) <= 63 and NAME.match(name.replace(".", "-")), name
        assert ".-" not in name and "-." not in name


def test_controller_wide_default_windows_come_from_the_environment_and_merge_with_the_repository(monkeypatch):
    """Issue 11 item 8 (from burrito): default sync windows, as the chart passes them (JSON in the variable)."""
    from burrito_py.controllers.layer.actions import sync_windows
    from burrito_py.controllers.settings import ControllerSettings

    monkeypatch.setenv("BURRITO_PY_DEFAULT_SYNC_WINDOWS",
                       '[{"kind": "deny", "schedule": "0 9 * * *", "duration": "2h", "actions": ["apply"]}]')
    defaults = ControllerSettings().default_sync_windows
    repository = {"spec": {"syncWindows": [{"kind": "deny", "schedule": "0 0 30 2 *", "duration": "1h"}]}}
    windows = sync_windows(repository, defaults)
    assert [w.schedule for w in windows] == ["0 0 30 2 *", "0 9 * * *"]
    d = decide_layer(snap(layer(), windows=windows), NOW)
    assert d.state == "ApplyNeeded" and d.create_run is None and not condition(d, "IsInSyncWindow").status


# -- a run stopped at its timeout (§6.1): never retried, and the layer says so ----------------------------------
def test_a_timed_out_run_exhausts_its_plan_or_apply_with_the_reason_timed_out():
    stopped = "runner pod app-apply-1-1 ran longer than its timeout of 1d and was stopped: interrupted by SIGTERM"
    runs = [RunView("app-apply-1", "apply", "Failed", "c1", message=stopped, plan_sum="sha256:aa", relevant_commit="c1",
                    reason="TimedOut", artifact=PLAN_RUN), RunView(PLAN_RUN, "plan", "Succeeded", "c1")]
    d = decide_layer(snap(layer(), runs), NOW)
    assert d.state == "MaxRetriesReached" and d.create_run is None, "not applied again on its own"
    assert d.exhausted_apply is not None and d.exhausted_apply.reason == "TimedOut"
    cond = condition(d, "HasLastRunReachedRetryLimit")
    assert cond.reason == "TimedOut"
    assert cond.message == f"run app-apply-1 was stopped at its timeout, not retried: {stopped}"
    plan = RunView(PLAN_RUN, "plan", "Failed", "c1", message="runner pod … was stopped", relevant_commit="c1",
                   reason="TimedOut")
    d = decide_layer(snap(layer(plan_sum=None, plan_commit=None), [plan]), NOW)
    assert d.exhausted_plan is not None and d.exhausted_plan.reason == "TimedOut"
    assert condition(d, "HasLastRunReachedRetryLimit").reason == "TimedOut"
