"""Properties of the layer reconcile's one pure decision (`actions.decide_reconcile`, issue 28): from any snapshot
a layer may be in, the same actions every time, and none of those a reconcile must never take.

The state machine under it has its own tests (test_layer_decisions*.py, test_destroy_decisions.py,
test_burrito_layer.py, on `decide`); here `decide_reconcile` is checked to act on exactly that decision."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.api.annotations import parse_plan_run
from burrito_py.api.layer import LAYER_STATES
from burrito_py.controllers.layer.actions import LayerFacts, decide, decide_reconcile
from burrito_py.controllers.layer.decide import NO_CHANGES
from burrito_py.controllers.layer.destroy import DESTROY_FINALIZER
from burrito_py.controllers.layer.plan_review import Review
from burrito_py.controllers.layer.run_creation import RunCreation
from burrito_py.controllers.layer.run_view import TERMINAL_RUN_STATES
from burrito_py.controllers.layer.validation import LayerValidation
from burrito_py.kube.conditions import Cond
from burrito_py.timeutil import format_time

NOW = datetime(2026, 5, 8, 11, 22, 30, tzinfo=UTC)
DRIFT = timedelta(minutes=20)
GRACE, GRACE_CAP = timedelta(seconds=15), timedelta(minutes=5)
SUMS = st.sampled_from(["sha256:aa", "sha256:bb"])
COMMITS = st.sampled_from(["c1", "c2"])
RUN_NAMES = ["r0", "r1", "r2", "r3", "r4", "r5"]


@st.composite
def run_bodies(draw: st.DrawFn, name: str, second: int) -> dict[str, Any]:
    action = draw(st.sampled_from(["plan", "apply"]))
    state = draw(st.sampled_from([None, "Initial", "Running", "Retrying", "Succeeded", "Failed"]))
    annotations = {ann.RUN_PLAN_SUM: draw(SUMS)} if action == "apply" else {}
    status: dict[str, Any] = {"state": state} if state else {}
    if state == "Succeeded" and action == "plan":
        status["attempts"] = [{"number": 1, "exitCode": 0, "planSum": draw(SUMS)}]
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                     "creationTimestamp": format_time(NOW - timedelta(seconds=second)),
                     "labels": {ann.LABEL_LAYER: "app"}, "annotations": annotations,
                     "ownerReferences": [{"kind": "TerraformLayer", "uid": "uid-app"}]},
        "spec": {"action": action, "layer": {"name": "app", "namespace": "ns", "revision": draw(COMMITS)},
                 "destroy": draw(st.booleans())},
        "status": status,
    }


@st.composite
def facts(draw: st.DrawFn) -> LayerFacts:
    annotations: dict[str, str] = {}
    for key, values in [
        (ann.BRANCH_COMMIT, COMMITS),
        (ann.RELEVANT_COMMIT, COMMITS),
        (ann.PLAN_COMMIT, COMMITS),
        (ann.PLAN_SUM, SUMS),
        (ann.APPLY_SUM, SUMS),
        (ann.PLAN_DATE, st.integers(0, 3600).map(lambda s: format_time(NOW - timedelta(seconds=s)))),
        (ann.PLAN_RUN, st.sampled_from(["r0/1", "r1/1", "gone/1"])),
        (ann.APPLY_RUN, st.sampled_from(["r1/1", "r2/1"])),
        (ann.SYNC_NOW, st.just("x")),
        (ann.PLAN_SUMMARY, st.sampled_from([NO_CHANGES, "Plan: 1 to add, 0 to change, 0 to destroy"])),
        (ann.APPROVE_PLAN, SUMS),
    ]:
        if draw(st.booleans()):
            annotations[key] = draw(values)
    count = draw(st.integers(0, len(RUN_NAMES)))
    runs = tuple(draw(run_bodies(name, second)) for second, name in enumerate(RUN_NAMES[:count]))
    if draw(st.booleans()):
        # A layer whose current plan was made and recorded (what an apply needs), the rest left to chance.
        plan_sum, commit = draw(SUMS), draw(COMMITS)
        annotations |= {ann.PLAN_SUM: plan_sum, ann.PLAN_RUN: "r0/1", ann.PLAN_COMMIT: commit,
                        ann.BRANCH_COMMIT: commit, ann.RELEVANT_COMMIT: commit,
                        ann.PLAN_DATE: format_time(NOW - timedelta(seconds=draw(st.integers(0, 600)))),
                        ann.PLAN_SUMMARY: "Plan: 1 to add, 0 to change, 0 to destroy"}
        plan_run = draw(run_bodies("r0", len(RUN_NAMES)))
        plan_run["spec"] |= {"action": "plan", "destroy": False,
                             "layer": {"name": "app", "namespace": "ns", "revision": commit}}
        plan_run["status"] = {"state": "Succeeded", "attempts": [{"number": 1, "exitCode": 0, "planSum": plan_sum}]}
        others = tuple(run for run in runs if run["metadata"]["name"] != "r0" and not draw(st.booleans()))
        runs = (*others, plan_run)
        if draw(st.booleans()):
            annotations.pop(ann.APPLY_SUM, None)
    deleting = draw(st.booleans())
    meta: dict[str, Any] = {"name": "app", "namespace": "ns", "uid": "uid-app", "generation": 1,
                            "annotations": annotations}
    if draw(st.booleans()):
        meta["finalizers"] = [DESTROY_FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = format_time(NOW)
    plan_sum = annotations.get(ann.PLAN_SUM)
    review = None
    if not deleting and draw(st.booleans()):
        policy = {"planSum": plan_sum, "verdict": draw(st.sampled_from(["Allowed", "Denied", "GatesAutoApply"]))}
        review = Review(policy if plan_sum else None, None,
                        [("Normal", "PolicyWarned", "plan")] if draw(st.booleans()) else [],
                        draw(st.none() | st.just(30.0)))
    ready = draw(st.booleans())
    validation = LayerValidation(Cond("Ready", ready, "Ready" if ready else "Invalid"), auto_apply=draw(st.booleans()),
                                 max_retries=5, runs_to_keep=draw(st.integers(1, 4)),
                                 destroy_on_deletion=draw(st.booleans()))
    creation = draw(st.sampled_from([RunCreation(), RunCreation("plan", "c1", 2, NOW - timedelta(seconds=5), "no"),
                                     RunCreation("apply", "c2", 1, NOW - timedelta(minutes=10), "no")]))
    status: dict[str, Any] = {"state": draw(st.none() | st.sampled_from(LAYER_STATES))}
    return LayerFacts(
        layer={"metadata": meta, "spec": {"branch": "main", "repository": {"name": "repo"}}, "status": status},
        repository=None,
        validation=validation,
        runs=runs,
        now=NOW,
        drift_period=DRIFT,
        grace=GRACE,
        grace_cap=GRACE_CAP,
        review=review,
        creation=creation,
        withdrawn=draw(st.none() | st.just("the CRD is being deleted")) if deleting else None,
        backoff_checked=draw(st.booleans()),
    )


def live(run: dict[str, Any]) -> bool:
    return (run.get("status") or {}).get("state") not in TERMINAL_RUN_STATES


@settings(max_examples=300)
@given(facts())
def test_the_decision_is_a_function_of_the_snapshot(f: LayerFacts) -> None:
    assert decide_reconcile(f) == decide_reconcile(f)


@settings(max_examples=300)
@given(facts())
def test_it_acts_on_the_state_machines_decision(f: LayerFacts) -> None:
    """What the existing decision tests check (`decide`) is what the reconcile acts on."""
    actions = decide_reconcile(f)
    assert actions.decision == decide(f.layer, f.runs, f.validation, f.drift_period, f.now, f.withdrawn, f.windows,
                                      f.review, None, f.dependents, f.named_plan_run)
    assert actions.settlement.status.get("state") == actions.decision.state
    assert actions.decision.state in (*LAYER_STATES, None)


@settings(max_examples=500)
@given(facts())
def test_never_a_second_live_run_nor_a_run_of_an_invalid_layer(f: LayerFacts) -> None:
    actions = decide_reconcile(f)
    if actions.create is not None:
        assert not any(live(run) for run in f.runs)
        assert f.validation.ready.status
        assert actions.hold_for is None
        assert actions.wake_repository is None


@settings(max_examples=500)
@given(facts())
def test_never_deletes_a_live_run_nor_the_runs_the_layer_points_at(f: LayerFacts) -> None:
    actions = decide_reconcile(f)
    annotations = f.layer["metadata"]["annotations"]
    pointed = {found[0] for key in (ann.PLAN_RUN, ann.APPLY_RUN) if (found := parse_plan_run(annotations.get(key)))}
    by_name = {run["metadata"]["name"]: run for run in f.runs}
    doomed = actions.settlement.delete_runs
    for name in doomed:
        assert not live(by_name[name]) and name not in pointed
    assert len(f.runs) - len(doomed) >= min(len(f.runs), f.validation.runs_to_keep)
    # The status lists the runs that remain, never one it deletes.
    assert {r["name"] for r in actions.settlement.status.get("latestRuns") or ()} == set(by_name) - set(doomed)


@settings(max_examples=500)
@given(facts())
def test_an_apply_is_of_the_current_plan_and_only_once_reviewed(f: LayerFacts) -> None:
    actions = decide_reconcile(f)
    create = actions.create
    if create is None or create.action != "apply":
        return
    annotations = f.layer["metadata"]["annotations"]
    assert create.plan_sum == annotations.get(ann.PLAN_SUM)
    assert create.artifact_run == (parse_plan_run(annotations.get(ann.PLAN_RUN)) or ("",))[0]
    if not f.layer["metadata"].get("deletionTimestamp"):
        # The controllers' review of that very plan, not denied (an override needs an approval and a principal).
        assert f.review is not None and f.review.policy is not None
        assert f.review.policy["planSum"] == create.plan_sum
        assert f.review.policy["verdict"] != "Denied"


@settings(max_examples=500)
@given(facts())
def test_the_finalizer(f: LayerFacts) -> None:
    actions = decide_reconcile(f)
    deleting = bool(f.layer["metadata"].get("deletionTimestamp"))
    if actions.finalizer == "add":
        assert not deleting and f.validation.destroy_on_deletion
    if actions.settlement.release_finalizer:
        # Only a layer being deleted is let go, and nothing follows (no outputs, no wake).
        assert deleting and actions.create is None
        assert actions.settlement.outputs is None and actions.settlement.wake_in is None


@settings(max_examples=300)
@given(facts())
def test_a_refused_create_waits_for_its_backoff(f: LayerFacts) -> None:
    actions = decide_reconcile(f)
    if actions.hold_for is not None:
        assert actions.create is None and not f.backoff_checked
        assert f.creation.same_run(actions.decision.create_run.action,  # type: ignore[union-attr]
                                   actions.decision.create_run.revision)  # type: ignore[union-attr]
        assert timedelta(0) < actions.hold_for <= GRACE_CAP


def test_an_auto_layer_applies_its_reviewed_plan_and_not_before() -> None:
    """The case the apply property is about, spelled out (so that it is never vacuous)."""
    annotations = {ann.PLAN_SUM: "sha256:aa", ann.PLAN_RUN: "r0/1", ann.PLAN_COMMIT: "c1", ann.BRANCH_COMMIT: "c1",
                   ann.RELEVANT_COMMIT: "c1", ann.PLAN_DATE: format_time(NOW - timedelta(minutes=1)),
                   ann.PLAN_SUMMARY: "Plan: 1 to add, 0 to change, 0 to destroy"}
    plan_run = {
        "metadata": {"name": "r0", "namespace": "ns", "uid": "uid-r0", "creationTimestamp": format_time(NOW),
                     "labels": {ann.LABEL_LAYER: "app"},
                     "ownerReferences": [{"kind": "TerraformLayer", "uid": "uid-app"}]},
        "spec": {"action": "plan", "layer": {"name": "app", "namespace": "ns", "revision": "c1"}},
        "status": {"state": "Succeeded", "attempts": [{"number": 1, "exitCode": 0, "planSum": "sha256:aa"}]},
    }
    layer = {"metadata": {"name": "app", "namespace": "ns", "uid": "uid-app", "annotations": annotations,
                          "finalizers": [DESTROY_FINALIZER]},
             "spec": {"branch": "main", "repository": {"name": "repo"}}, "status": {"state": "ApplyNeeded"}}
    validation = LayerValidation(Cond("Ready", True, "Ready"), auto_apply=True, max_retries=5, runs_to_keep=5,
                                 destroy_on_deletion=True)
    unreviewed = LayerFacts(layer, None, validation, (plan_run,), NOW, DRIFT, GRACE, GRACE_CAP,
                            review=Review(None, None))
    assert decide_reconcile(unreviewed).create is None
    reviewed = LayerFacts(layer, None, validation, (plan_run,), NOW, DRIFT, GRACE, GRACE_CAP,
                          review=Review({"planSum": "sha256:aa", "verdict": "Allowed"}, None))
    create = decide_reconcile(reviewed).create
    assert create is not None and create.action == "apply" and create.plan_sum == "sha256:aa"
