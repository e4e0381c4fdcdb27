"""Whether the current plan may be applied without a person, or at all (pure; docs/architecture.md §5.5).

The controllers review every plan once, from the plan JSON in the datastore (controllers/layer/plan_review.py): the
plan policies' verdict and the drift state, both keyed by the plan's sum and kept in `status.policy` and
`status.drift`. This module turns that review into what the layer decision needs:

- an `auto` layer applies a plan by itself only when no policy gates it (`gateAutoApply` or `mandatory`
  denial) and, for a plan that corrects drift, when `remediationStrategy.drift` allows it (`detect`: never;
  `autoIfPolicyPasses`: when every change is an update; `auto`: always);
- an approval of the plan's sum applies it, except after a `mandatory` denial, which needs an override of
  that same sum by a principal the denying policies allow as well;
- a plan not reviewed yet is applied by nobody: the review is retried (the datastore may be down).
"""

from __future__ import annotations

from dataclasses import dataclass

from burrito_py.kube.conditions import Cond

GATING_VERDICTS = frozenset({"GatesAutoApply", "Denied"})


@dataclass(frozen=True, slots=True)
class PlanGate:
    """The controllers' review of one plan, as the decision reads it."""

    plan_sum: str
    verdict: str = "Allowed"  # Allowed | Warned | GatesAutoApply | Denied
    # The rules behind a gating verdict, e.g. "default/no-replace/db (terraform_data.db)": names, never values.
    reason: str = ""
    drift_state: str = "Unknown"  # InSync | Drifted | CodeChange | Unknown
    update_only: bool = False  # every resource the plan changes is updated in place
    resources: int = 0  # how many resources the plan changes
    # The principal whose override of this very sum the denying policies allow (None: no valid override).
    override_by: str | None = None
    # What applying the plan would change, as a digest (plans/changes.py); None when the review could not read it.
    changes_digest: str | None = None


@dataclass(frozen=True, slots=True)
class GateOutcome:
    auto_allowed: bool  # an `auto` layer may apply the plan by itself
    approval_allowed: bool  # an approval of the plan's sum applies it
    waiting_reason: str  # why a person must act (empty when nothing is held back)
    condition: Cond  # IsPlanAllowed


def gate_plan(gate: PlanGate | None, plan_sum: str | None, drift_remediation: str) -> GateOutcome:
    if plan_sum is None:
        return GateOutcome(True, True, "", Cond("IsPlanAllowed", True, "NoPlan", ""))
    if gate is None or gate.plan_sum != plan_sum:
        return GateOutcome(False, False, "the plan is not reviewed yet", Cond(
            "IsPlanAllowed", None, "NotReviewed",
            f"plan {plan_sum} is not reviewed yet; nothing applies it until it is"))
    if gate.verdict == "Denied":
        if gate.override_by is not None:
            return GateOutcome(False, True, f"a mandatory policy denies the plan ({gate.reason}); overridden by "
                               f"{gate.override_by}, it applies once approved", Cond(
                                   "IsPlanAllowed", True, "Overridden",
                                   f"denied by {gate.reason}; overridden by {gate.override_by}"))
        return GateOutcome(False, False, f"a mandatory policy denies the plan ({gate.reason}): an approval applies "
                           "it only with an override by a principal the policy allows", Cond(
                               "IsPlanAllowed", False, "Denied", f"denied by {gate.reason}"))
    drift_hold = _drift_hold(gate, drift_remediation)
    if gate.verdict == "GatesAutoApply":
        return GateOutcome(False, True, f"a policy gates auto-apply ({gate.reason}): approve the plan's sum",
                           Cond("IsPlanAllowed", False, "GatesAutoApply", f"auto-apply gated by {gate.reason}"))
    allowed = Cond("IsPlanAllowed", True, gate.verdict, f"warned by {gate.reason}" if gate.reason else "")
    if drift_hold:
        return GateOutcome(False, True, drift_hold, allowed)
    return GateOutcome(True, True, "", allowed)


def _drift_hold(gate: PlanGate, remediation: str) -> str:
    """Why a drift-correcting plan waits for a person (empty: it does not)."""
    if gate.drift_state != "Drifted" or remediation == "auto":
        return ""
    if remediation == "autoIfPolicyPasses":
        if gate.update_only:
            return ""
        return ("the plan corrects drift by more than updates (remediationStrategy.drift: autoIfPolicyPasses): "
                "approve the plan's sum")
    return "the plan corrects drift (remediationStrategy.drift: detect): approve the plan's sum to apply it"


def drift_condition(state: str | None, resources: int) -> Cond:
    if state == "Drifted":
        return Cond("Drifted", True, "DriftDetected",
                    f"{resources} resource(s) differ from the applied code's plan")
    reason = {"InSync": "InSync", "CodeChange": "CodeChange"}.get(state or "", "Unknown")
    message = {"CodeChange": "the plan brings a code change, not a drift correction"}.get(reason, "")
    return Cond("Drifted", False if reason != "Unknown" else None, reason, message)
