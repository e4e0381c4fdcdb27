"""An apply's artifact is the controllers' decision, never a runner's claim (issue 24, design item 4): the pure
check, and the layer decision that refuses a forged `plan-run` / `plan-sum` visibly and never applies it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.artifact_check import CONDITION, REFUSED, LayerIdentity, artifact_refusal
from burrito_py.controllers.layer.decide import LayerSnapshot, decide_layer
from burrito_py.controllers.layer.destroy import DESTROY_PLAN_REFUSED, DestroySnapshot, decide_destroy
from burrito_py.controllers.layer.plan_gate import PlanGate
from burrito_py.controllers.layer.run_view import RunView

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
LAYER = LayerIdentity("uid-app", "team", "app")
SUM = "sha256:" + "a" * 64
FORGED = "sha256:" + "f" * 64
GOOD = RunView(
    name="app-plan-1", action="plan", state="Succeeded", revision="c1", owners=("uid-app",), layer_label="app",
    layer_name="app", layer_namespace="team", result_attempt=2, result_sum=SUM,
)


def test_the_layers_own_recorded_plan_passes() -> None:
    assert artifact_refusal(LAYER, "app-plan-1/2", SUM, GOOD) is None


def test_a_pull_request_plan_is_never_an_artifact() -> None:
    """Finding 1: the base layer's annotations pointed at a pull request's plan run."""
    pr = replace(GOOD, name="app-pr-7", owners=(), layer_label=None, pull_request="github-7")
    reason = artifact_refusal(LAYER, "app-pr-7/1", SUM, pr)
    assert reason == "run app-pr-7 is not owned by this layer (uid uid-app)"
    # Even one that somehow carried the layer's owner and label is refused for being a pull request's.
    reason = artifact_refusal(LAYER, "app-pr-7/2", SUM, replace(pr, owners=("uid-app",), layer_label="app"))
    assert reason == "run app-pr-7 is the plan of pull request github-7, which is never applied"


def test_another_layers_run_is_refused() -> None:
    other = replace(GOOD, name="db-plan-1", owners=("uid-db",), layer_label="db", layer_name="db")
    assert artifact_refusal(LAYER, "db-plan-1/2", SUM, other) == (
        "run db-plan-1 is not owned by this layer (uid uid-app)")
    # A run claiming the layer's owner but working for another layer.
    claims = replace(other, owners=("uid-app",), layer_label="app")
    assert artifact_refusal(LAYER, "db-plan-1/2", SUM, claims) == "run db-plan-1 works for layer team/db"


def test_a_non_last_attempt_a_forged_sum_and_a_missing_run_are_refused() -> None:
    """Finding 1 (a)/(b): the crafted plan as "attempt 7", or the right attempt with another sum."""
    assert artifact_refusal(LAYER, "app-plan-1/7", SUM, GOOD) == (
        "attempt 7 is not the last successful attempt of run app-plan-1 (its status records attempt 2)")
    assert artifact_refusal(LAYER, "app-plan-1/1", SUM, GOOD) is not None
    assert artifact_refusal(LAYER, "app-plan-1/2", FORGED, GOOD) == (
        f"plan-sum {FORGED} is not the sum the controllers recorded for run app-plan-1 attempt 2 ({SUM})")
    assert artifact_refusal(LAYER, "ghost/1", SUM, None) == (
        "run ghost is not a run the controllers hold in namespace team")
    for bad in (None, "", "app-plan-1", "app-plan-1/x", "/2"):
        assert artifact_refusal(LAYER, bad, SUM, GOOD) is not None


def test_an_apply_run_a_failed_or_live_run_and_one_without_a_recorded_sum_are_refused() -> None:
    assert "apply run" in (artifact_refusal(LAYER, "app-plan-1/2", SUM, replace(GOOD, action="apply")) or "")
    for state in ("Failed", "Running", None):
        assert artifact_refusal(LAYER, "app-plan-1/2", SUM, replace(GOOD, state=state)) is not None
    # Made before the run controller recorded sums (an upgrade): planned again, never applied.
    assert artifact_refusal(LAYER, "app-plan-1/2", SUM, replace(GOOD, result_sum=None)) is not None


names = st.sampled_from(["app-plan-1", "app-plan-2", "db-plan-1", "app-pr-7"])


@given(
    plan_run=st.tuples(names, st.integers(0, 9)).map(lambda t: f"{t[0]}/{t[1]}") | st.none() | st.text(max_size=12),
    plan_sum=st.sampled_from([SUM, FORGED, "", None]),
    name=names,
    owners=st.sampled_from([(), ("uid-app",), ("uid-db",), ("uid-db", "uid-app")]),
    label=st.sampled_from([None, "app", "db"]),
    layer_name=st.sampled_from(["app", "db"]),
    layer_namespace=st.sampled_from([None, "team", "other"]),
    pull_request=st.sampled_from([None, "github-7"]),
    action=st.sampled_from(["plan", "apply"]),
    state=st.sampled_from([None, "Running", "Succeeded", "Failed"]),
    result_attempt=st.none() | st.integers(0, 9),
    result_sum=st.sampled_from([SUM, FORGED, None]),
)
def test_only_the_layers_own_succeeded_recorded_plan_is_ever_accepted(
    plan_run: str | None, plan_sum: str | None, name: str, owners: tuple[str, ...], label: str | None,
    layer_name: str, layer_namespace: str | None, pull_request: str | None, action: str, state: str | None,
    result_attempt: int | None, result_sum: str | None,
) -> None:
    run = RunView(name=name, action=action, state=state, revision="c1", owners=owners, layer_label=label,
                  layer_name=layer_name, layer_namespace=layer_namespace, pull_request=pull_request,
                  result_attempt=result_attempt, result_sum=result_sum)
    if artifact_refusal(LAYER, plan_run, plan_sum, run) is None:
        assert plan_run == f"{name}/{result_attempt}"
        assert "uid-app" in owners and label == "app" and layer_name == "app" and layer_namespace in (None, "team")
        assert pull_request is None and action == "plan" and state == "Succeeded"
        assert plan_sum == result_sum and plan_sum


def snapshot(plan_run: str, plan_sum: str, named: RunView | None, *, auto_apply: bool = True,
             approval: str | None = None) -> LayerSnapshot:
    annotations = {ann.BRANCH_COMMIT: "c1", ann.RELEVANT_COMMIT: "c1", ann.PLAN_COMMIT: "c1",
                   ann.PLAN_DATE: "2026-05-01T11:59:00Z", ann.PLAN_SUM: plan_sum, ann.PLAN_RUN: plan_run,
                   ann.PLAN_SUMMARY: "Plan: 1 to add, 0 to change, 0 to destroy",
                   **({ann.APPROVE_PLAN: approval} if approval else {})}
    own = named if named is not None and named.owners == ("uid-app",) else None
    # Reviewed and allowed (the policy gate has its own tests): only the artifact check stands in the way.
    return LayerSnapshot(annotations, own or GOOD, own or GOOD, None, auto_apply, timedelta(hours=1),
                         plan_run=own, identity=LAYER, named_plan_run=named, gate=PlanGate(plan_sum))


def condition(decision: object, type_: str = CONDITION) -> tuple[bool, str, str]:
    cond = next(c for c in decision.conditions if c.type == type_)  # type: ignore[attr-defined]
    return cond.status, cond.reason, cond.message


def test_the_decision_applies_the_recorded_plan_with_its_sum() -> None:
    d = decide_layer(snapshot("app-plan-1/2", SUM, GOOD), NOW)
    assert d.state == "ApplyNeeded" and d.create_run is not None
    assert (d.create_run.action, d.create_run.artifact_run, d.create_run.artifact_attempt, d.create_run.plan_sum) == (
        "apply", "app-plan-1", 2, SUM)
    assert condition(d)[:2] == (True, "ArtifactVerified")


def test_a_forged_plan_run_is_never_applied_and_says_why_then_plans_again() -> None:
    """Finding 1 (b): the layer's plan-run/plan-sum point at a pull request's plan, another layer's plan or a
    non-last attempt: no apply run, a condition naming the mismatch, and a plan of the layer's own code."""
    pr_run = replace(GOOD, name="app-pr-7", owners=(), layer_label=None, pull_request="github-7", result_attempt=1)
    other = replace(GOOD, name="db-plan-1", owners=("uid-db",), layer_label="db", layer_name="db")
    for plan_run, plan_sum, named, why in (
        ("app-pr-7/1", SUM, pr_run, "not owned by this layer"),
        ("db-plan-1/2", SUM, other, "not owned by this layer"),
        ("app-plan-1/7", FORGED, GOOD, "attempt 7 is not the last successful attempt"),
        ("app-plan-1/2", FORGED, GOOD, "is not the sum the controllers recorded"),
    ):
        for auto, approval in ((True, None), (False, plan_sum)):  # auto, or a person approving the forged sum
            d = decide_layer(snapshot(plan_run, plan_sum, named, auto_apply=auto, approval=approval), NOW)
            assert d.create_run is None or d.create_run.action == "plan", (plan_run, d.create_run)
            assert d.state == "PlanNeeded" and d.pending_plan is None and not d.remove_approval
            status, reason, message = condition(d)
            assert (status, reason) == (False, REFUSED) and why in message and plan_run in message


def test_a_live_run_is_not_judged_while_its_result_is_recorded() -> None:
    live = replace(GOOD, state="Running", result_attempt=None, result_sum=None)
    snap = replace(snapshot("app-plan-1/2", SUM, live), active_run=live)
    d = decide_layer(snap, NOW)
    assert d.state == "Running" and condition(d)[:2] == (True, "NothingToVerify")
    # Nor is it offered for approval before it is recorded (and reviewed).
    manual = replace(snapshot("app-plan-1/2", SUM, live, auto_apply=False), active_run=live)
    assert decide_layer(manual, NOW).pending_plan is None


def test_a_forgery_stays_reported_while_the_layer_plans_again() -> None:
    pr_run = replace(GOOD, name="app-pr-7", owners=(), layer_label=None, pull_request="github-7", result_attempt=1)
    replanning = replace(GOOD, name="app-plan-9", state="Running", result_attempt=None, result_sum=None)
    snap = replace(snapshot("app-pr-7/1", SUM, pr_run), active_run=replanning)
    d = decide_layer(snap, NOW)
    assert d.state == "Running" and d.create_run is None
    assert condition(d)[:2] == (False, REFUSED)


def test_a_destroy_plan_is_applied_only_when_recorded() -> None:
    annotations = {ann.BRANCH_COMMIT: "c1", ann.PLAN_RUN: "app-plan-1/2", ann.PLAN_SUM: SUM,
                   ann.PLAN_SUMMARY: "Plan: 0 to add, 0 to change, 1 to destroy"}
    destroy = replace(GOOD, destroy=True)
    ok = decide_destroy(DestroySnapshot(annotations, (destroy,), 1, True, identity=LAYER))
    assert ok.create_run is not None and ok.create_run.action == "apply" and ok.create_run.plan_sum == SUM
    forged = decide_destroy(DestroySnapshot({**annotations, ann.PLAN_SUM: FORGED}, (destroy,), 1, True,
                                            identity=LAYER))
    assert forged.create_run is not None and forged.create_run.action == "plan" and forged.create_run.destroy
    _, reason, message = condition(forged, "HasDestroyFailed")
    assert reason == DESTROY_PLAN_REFUSED and "never applied" in message
