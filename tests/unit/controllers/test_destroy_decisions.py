from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.api.layer import LAYER_STATES
from burrito_py.controllers.layer.decide import NO_CHANGES, CreateRun, LayerDecision
from burrito_py.controllers.layer.destroy import DESTROY_FINALIZER, DestroySnapshot, decide_destroy, finalizer_change
from burrito_py.controllers.layer.run_view import RunView

APPLIED = {
    ann.BRANCH_COMMIT: "c1",
    ann.PLAN_SUM: "sha256:aa",
    ann.PLAN_RUN: "app-plan-1/1",
    ann.PLAN_COMMIT: "c1",
    ann.APPLY_SUM: "sha256:aa",
    ann.APPLY_COMMIT: "c1",
}
DESTROY_PLANNED = APPLIED | {
    ann.PLAN_SUM: "sha256:dd",
    ann.PLAN_RUN: "app-plan-d/2",
    ann.PLAN_SUMMARY: "Plan: 0 to add, 0 to change, 1 to destroy",
}


def run(name: str, action: str, state: str | None, revision: str = "c1", *, destroy: bool = True,
        generation: int | None = 2, message: str = "") -> RunView:
    return RunView(name, action, state, revision, destroy=destroy, layer_generation=generation, message=message)


def snap(annotations: dict[str, str], *runs: RunView, generation: int = 2, flag: bool = True) -> DestroySnapshot:
    return DestroySnapshot(annotations, tuple(runs), generation, flag)


def failed_reason(d: LayerDecision) -> tuple[bool, str, str]:
    c = next(c for c in d.conditions if c.type == "HasDestroyFailed")
    return c.status, c.reason, c.message


# -- the finalizer ---------------------------------------------------------------------------------
def test_the_finalizer_is_added_with_the_flag_and_removed_without_it():
    assert finalizer_change(True, [], deleting=False) == "add"
    assert finalizer_change(True, ["other/x"], deleting=False) == "add"
    assert finalizer_change(True, [DESTROY_FINALIZER], deleting=False) is None
    assert finalizer_change(False, [], deleting=False) is None
    assert finalizer_change(False, ["other/x", DESTROY_FINALIZER], deleting=False) == "remove"
    assert finalizer_change(False, [DESTROY_FINALIZER], deleting=True) == "remove"
    # Kubernetes refuses new finalizers on an object being deleted; the destroy itself handles ours.
    assert finalizer_change(True, [], deleting=True) is None
    assert finalizer_change(True, [DESTROY_FINALIZER], deleting=True) is None


@given(st.booleans(), st.lists(st.sampled_from([DESTROY_FINALIZER, "a/b", "c/d"]), unique=True), st.booleans())
def test_the_finalizer_change_leads_to_the_flag(flag: bool, finalizers: list[str], deleting: bool):
    change = finalizer_change(flag, finalizers, deleting)
    after = set(finalizers) | ({DESTROY_FINALIZER} if change == "add" else set())
    after -= {DESTROY_FINALIZER} if change == "remove" else set()
    assert (DESTROY_FINALIZER in after) == flag or (deleting and flag)
    assert change != "add" or not deleting


# -- the sequence ----------------------------------------------------------------------------------
def test_deleting_plans_a_destroy_at_the_branch_commit():
    d = decide_destroy(snap(APPLIED | {ann.BRANCH_COMMIT: "c2"}, run("app-apply-1", "apply", "Succeeded",
                                                                      destroy=False)))
    assert d.state == "PlanNeeded" and d.create_run == CreateRun("plan", "c2", destroy=True)
    assert not d.remove_finalizer and failed_reason(d)[:2] == (False, "DestroyPlanNeeded")


def test_then_applies_exactly_that_destroy_plan_whatever_the_approval_mode():
    d = decide_destroy(snap(DESTROY_PLANNED, run("app-plan-d", "plan", "Succeeded")))
    assert d.state == "ApplyNeeded"
    # It carries the plan's sum, which its runner checks the downloaded plan against.
    assert d.create_run == CreateRun("apply", "c1", "app-plan-d", 2, destroy=True, plan_sum="sha256:dd")


def test_then_lets_the_layer_go():
    d = decide_destroy(snap(DESTROY_PLANNED, run("app-apply-d", "apply", "Succeeded"),
                            run("app-plan-d", "plan", "Succeeded")))
    assert d.remove_finalizer and d.create_run is None and failed_reason(d)[1] == "Destroyed"


def test_an_empty_destroy_plan_needs_no_apply():
    d = decide_destroy(snap(DESTROY_PLANNED | {ann.PLAN_SUMMARY: NO_CHANGES}, run("app-plan-d", "plan", "Succeeded")))
    assert d.remove_finalizer and d.create_run is None


def test_a_succeeded_destroy_plan_whose_annotations_lag_waits():
    d = decide_destroy(snap(APPLIED, run("app-plan-d", "plan", "Succeeded")))
    assert d.create_run is None and not d.remove_finalizer


def test_a_live_run_is_waited_for_whatever_it_is():
    for live in (run("app-apply-1", "apply", "Running", destroy=False), run("app-plan-d", "plan", None),
                 run("app-plan-d", "plan", "FailureGracePeriod")):
        d = decide_destroy(snap(APPLIED | {ann.SYNC_NOW: "x"}, live))
        assert d.state == "Running" and d.create_run is None and not d.remove_finalizer and not d.remove_sync_now


def test_without_the_flag_or_a_branch_commit_the_layer_goes_without_a_destroy():
    assert decide_destroy(snap(APPLIED, flag=False)).remove_finalizer
    d = decide_destroy(snap({}))
    assert d.remove_finalizer and d.create_run is None


def test_a_failed_destroy_stays_failed_until_a_fix_commit_a_sync_now_or_a_spec_change():
    failed = run("app-apply-d", "apply", "Failed", message="local-exec provisioner error")
    history = (failed, run("app-plan-d", "plan", "Succeeded"))
    d = decide_destroy(snap(DESTROY_PLANNED, *history))
    assert d.state == "MaxRetriesReached" and d.create_run is None and not d.remove_finalizer
    status, reason, message = failed_reason(d)
    assert status and reason == "DestroyFailed"
    assert "app-apply-d" in message and "local-exec provisioner error" in message and ann.SYNC_NOW in message

    fixed = decide_destroy(snap(DESTROY_PLANNED | {ann.BRANCH_COMMIT: "c2"}, *history))
    assert fixed.create_run == CreateRun("plan", "c2", destroy=True)
    retried = decide_destroy(snap(DESTROY_PLANNED | {ann.SYNC_NOW: "now"}, *history))
    assert retried.create_run == CreateRun("plan", "c1", destroy=True) and retried.remove_sync_now
    edited = decide_destroy(snap(DESTROY_PLANNED, *history, generation=3))
    assert edited.create_run == CreateRun("plan", "c1", destroy=True) and not edited.remove_sync_now


def test_a_failed_destroy_plan_is_reported_as_such():
    d = decide_destroy(snap(APPLIED, run("app-plan-d", "plan", "Failed", message="bad code")))
    assert d.create_run is None and failed_reason(d)[0] and "destroy plan run app-plan-d" in failed_reason(d)[2]


# -- properties --------------------------------------------------------------------------------------
commits = st.sampled_from(["c1", "c2"])
states = st.sampled_from([None, "Initial", "Running", "Retrying", "FailureGracePeriod", "Succeeded", "Failed"])
names = st.sampled_from(["p1", "p2", "a1", "n1"])
run_views = st.builds(
    RunView, name=names, action=st.sampled_from(["plan", "apply"]), state=states, revision=commits,
    destroy=st.booleans(), layer_generation=st.sampled_from([None, 2, 3]),
)


@st.composite
def destroy_snapshots(draw: st.DrawFn) -> DestroySnapshot:
    a: dict[str, str] = {}
    for key, values in [
        (ann.BRANCH_COMMIT, commits),
        (ann.PLAN_RUN, st.sampled_from(["p1/1", "p2/3", "x"])),
        (ann.PLAN_SUM, st.just("sha256:dd")),
        (ann.PLAN_SUMMARY, st.sampled_from([NO_CHANGES, "Plan: 0 to add, 0 to change, 1 to destroy"])),
        (ann.SYNC_NOW, st.just("now")),
        (ann.APPLY_COMMIT, commits),
    ]:
        if draw(st.booleans()):
            a[key] = draw(values)
    runs = tuple(draw(st.lists(run_views, max_size=4)))
    return DestroySnapshot(a, runs, draw(st.sampled_from([2, 3])), draw(st.booleans()))


@given(destroy_snapshots())
def test_never_a_run_beside_a_live_one_nor_a_finalizer_removed_under_it(s: DestroySnapshot):
    d = decide_destroy(s)
    assert d.state in LAYER_STATES
    if s.destroy_on_deletion and any(not r.terminal for r in s.runs):
        assert d.create_run is None and not d.remove_finalizer and d.state == "Running"
    assert not (d.create_run is not None and d.remove_finalizer)


@given(destroy_snapshots())
def test_every_run_it_creates_is_a_destroy_and_an_apply_applies_the_last_destroy_plan(s: DestroySnapshot):
    d = decide_destroy(s)
    if d.create_run is None:
        return
    assert d.create_run.destroy
    if d.create_run.action == "apply":
        last = next(r for r in s.runs if r.destroy)
        assert last.action == "plan" and last.state == "Succeeded"
        assert d.create_run.artifact_run == last.name
        assert s.annotations.get(ann.PLAN_SUMMARY) != NO_CHANGES


@given(destroy_snapshots())
def test_the_finalizer_goes_only_after_a_destroy_or_when_there_is_nothing_to_destroy(s: DestroySnapshot):
    d = decide_destroy(s)
    if not d.remove_finalizer or not s.destroy_on_deletion:
        return
    last = next((r for r in s.runs if r.destroy), None)
    never_ran = not any(s.annotations.get(k) for k in (ann.BRANCH_COMMIT, ann.APPLY_COMMIT, ann.PLAN_COMMIT))
    applied = last is not None and last.action == "apply" and last.state == "Succeeded"
    empty = (last is not None and last.action == "plan" and last.state == "Succeeded"
             and s.annotations.get(ann.PLAN_SUMMARY) == NO_CHANGES)
    assert never_ran or applied or empty


@given(destroy_snapshots())
def test_no_runaway_a_retried_destroy_is_not_retried_again_without_a_new_trigger(s: DestroySnapshot):
    """After the retry its trigger is spent: the new run, once failed, leaves the layer failed."""
    d = decide_destroy(s)
    if d.create_run is None or d.create_run.action != "plan":
        return
    annotations = {k: v for k, v in s.annotations.items() if not (d.remove_sync_now and k == ann.SYNC_NOW)}
    new = RunView("p9", "plan", "Failed", d.create_run.revision, destroy=True, layer_generation=s.generation)
    after = decide_destroy(replace(s, annotations=annotations, runs=(new, *s.runs)))
    if ann.SYNC_NOW not in annotations:
        assert after.create_run is None and after.state == "MaxRetriesReached"
