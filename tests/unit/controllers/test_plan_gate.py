"""The gate between a reviewed plan and its apply (plan_gate.py) and the layer decision around it: an `auto`
layer is held back by a gating policy or a drift correction its remediation does not allow; a mandatory
denial holds back even an approval, until a valid override of that very sum."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.decide import LayerSnapshot, decide_layer
from burrito_py.controllers.layer.plan_gate import PlanGate, gate_plan
from burrito_py.timeutil import format_time

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
SUM = "sha256:aa"


def layer(**extra: str) -> dict[str, str]:
    return {ann.BRANCH_COMMIT: "c1", ann.RELEVANT_COMMIT: "c1", ann.PLAN_COMMIT: "c1", ann.PLAN_SUM: SUM,
            ann.PLAN_RUN: "app-plan-1/1", ann.PLAN_DATE: format_time(NOW - timedelta(minutes=1)),
            ann.PLAN_SUMMARY: "Plan: 0 to add, 1 to change, 0 to destroy", **extra}


def decide(gate: PlanGate | None, *, auto: bool = True, remediation: str = "detect", **extra: str):  # type: ignore[no-untyped-def]
    snap = LayerSnapshot(layer(**extra), None, None, None, auto, timedelta(minutes=20), gate=gate,
                         drift_remediation=remediation)
    return decide_layer(snap, NOW)


def action(gate: PlanGate | None, **kwargs: object) -> str | None:
    d = decide(gate, **kwargs)  # type: ignore[arg-type]
    return d.create_run.action if d.create_run is not None else None


def cond(d, type_: str):  # type: ignore[no-untyped-def]
    return next(c for c in d.conditions if c.type == type_)


def test_an_allowed_plan_is_auto_applied() -> None:
    assert action(PlanGate(SUM)) == "apply"
    assert action(PlanGate(SUM, "Warned", "p/w")) == "apply"


def test_an_unreviewed_plan_is_applied_by_nobody() -> None:
    d = decide(None)
    assert d.create_run is None and d.state == "ApplyNeeded"
    assert cond(d, "IsPlanAllowed").status is None and cond(d, "IsPlanAllowed").reason == "NotReviewed"
    assert action(None, auto=False, **{ann.APPROVE_PLAN: SUM}) is None
    assert action(PlanGate("sha256:other")) is None  # a review of another plan is no review of this one


def test_gate_auto_apply_waits_for_an_approval_of_that_sum() -> None:
    gate = PlanGate(SUM, "GatesAutoApply", "default/p/no-replace (terraform_data.db)")
    d = decide(gate)
    assert d.create_run is None and d.pending_plan is not None and d.pending_plan.sum == SUM
    assert "no-replace" in d.pending_plan.reason and "terraform_data.db" in d.pending_plan.reason
    assert cond(d, "IsPlanAllowed").status is False
    assert action(gate, **{ann.APPROVE_PLAN: "sha256:other"}) is None
    approved = decide(gate, **{ann.APPROVE_PLAN: SUM})
    assert approved.create_run is not None and approved.create_run.plan_sum == SUM and approved.remove_approval


def test_mandatory_needs_approval_and_a_valid_override() -> None:
    denied = PlanGate(SUM, "Denied", "default/p/no-destroy (terraform_data.a)")
    assert action(denied) is None
    assert action(denied, **{ann.APPROVE_PLAN: SUM}) is None
    assert action(denied, auto=False, **{ann.APPROVE_PLAN: SUM}) is None
    overridden = PlanGate(SUM, "Denied", "default/p/no-destroy", override_by="alice")
    assert action(overridden) is None  # an override is no approval
    assert action(overridden, **{ann.APPROVE_PLAN: SUM}) == "apply"
    assert action(overridden, auto=False, **{ann.APPROVE_PLAN: SUM}) == "apply"


@pytest.mark.parametrize(("remediation", "update_only", "applies"), [
    ("detect", True, False), ("detect", False, False),
    ("autoIfPolicyPasses", True, True), ("autoIfPolicyPasses", False, False),
    ("auto", False, True),
])
def test_drift_corrections_follow_the_remediation(remediation: str, update_only: bool, applies: bool) -> None:
    gate = PlanGate(SUM, drift_state="Drifted", update_only=update_only, resources=1)
    d = decide(gate, remediation=remediation)
    assert (d.create_run is not None) == applies
    assert cond(d, "Drifted").status is True and cond(d, "Drifted").reason == "DriftDetected"
    if not applies:
        assert d.pending_plan is not None and "drift" in d.pending_plan.reason
        assert action(gate, remediation=remediation, **{ann.APPROVE_PLAN: SUM}) == "apply"


def test_a_code_change_is_not_held_as_drift() -> None:
    d = decide(PlanGate(SUM, drift_state="CodeChange"))
    assert d.create_run is not None and cond(d, "Drifted").reason == "CodeChange"


def test_a_gating_policy_holds_a_drift_correction_even_under_auto_remediation() -> None:
    assert action(PlanGate(SUM, "GatesAutoApply", "p/r", drift_state="Drifted"), remediation="auto") is None


@given(st.sampled_from(["Allowed", "Warned", "GatesAutoApply", "Denied"]),
       st.sampled_from(["InSync", "Drifted", "CodeChange", "Unknown"]), st.booleans(), st.none() | st.just("bob"),
       st.sampled_from(["detect", "auto", "autoIfPolicyPasses"]), st.booleans(), st.booleans())
def test_no_apply_ever_gets_past_a_gate(verdict: str, drift: str, update_only: bool, override: str | None,
                                        remediation: str, auto: bool, approved: bool) -> None:
    gate = PlanGate(SUM, verdict, "p/r", drift, update_only, 1, override)
    extra = {ann.APPROVE_PLAN: SUM} if approved else {}
    created = action(gate, auto=auto, remediation=remediation, **extra) == "apply"
    if verdict == "Denied" and (override is None or not approved):
        assert not created
    if created and not approved:
        assert auto and verdict in ("Allowed", "Warned")
        assert drift != "Drifted" or remediation == "auto" or (remediation == "autoIfPolicyPasses" and update_only)
    outcome = gate_plan(gate, SUM, remediation)
    assert outcome.auto_allowed <= outcome.approval_allowed  # whatever auto may apply, an approval may too
