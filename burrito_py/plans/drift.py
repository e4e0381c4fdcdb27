"""Drift told apart from code changes (pure; docs/architecture.md §5.9).

A plan made at the code last applied that still has changes corrects drift: something changed the objects (or
what Terraform reads) outside Terraform. A plan made at other code brings a code change, whatever else it also
corrects; `resource_drift` alone (objects that changed but need no action) is converged, not drift. So the
state never says Drifted for a code change, nor for a plan without changes.
"""

from __future__ import annotations

from typing import Literal

from burrito_py.plans.model import PlanModel

__all__ = ["DriftState", "classify_drift"]

DriftState = Literal["InSync", "Drifted", "CodeChange", "Unknown"]


def classify_drift(plan: PlanModel | None, *, code_changed: bool | None) -> DriftState:
    """`code_changed`: whether the plan was made at other code (relevant commit) than the last apply's; None
    when unknown (never applied, or nothing to compare)."""
    if plan is None or plan.errored or code_changed is None:
        return "Unknown"
    if not plan.has_changes:
        return "InSync"
    return "CodeChange" if code_changed else "Drifted"
