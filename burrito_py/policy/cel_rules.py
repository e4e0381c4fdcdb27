"""CEL rules (the language of Kubernetes validation rules), evaluated in process with `common-expression-language`."""

from __future__ import annotations

from typing import Any

from burrito_py.api.policy import CelRule
from burrito_py.plans.model import PlanModel, ResourceChange
from burrito_py.policy.cel_eval import CelError, evaluate_cel

__all__ = ["CelRuleError", "cel_violations", "change_variable", "plan_variable"]


class CelRuleError(ValueError):
    """The expression does not compile, fails, or is not a bool: the rule's outcome is an error (denies)."""


def change_variable(rc: ResourceChange) -> dict[str, Any]:
    return {
        "address": rc.address, "previous_address": rc.previous_address or "", "module_address": rc.module_address or "",
        "mode": rc.mode, "type": rc.type, "name": rc.name, "provider_name": rc.provider_name,
        "actions": list(rc.actions), "action": rc.action, "action_reason": rc.action_reason or "",
        "importing": rc.importing, "moved": rc.moved, "before": rc.before, "after": rc.after,
    }


def plan_variable(plan: PlanModel, drift_correction: bool, with_changes: bool) -> dict[str, Any]:
    c = plan.counts
    body: dict[str, Any] = {
        "counts": {"add": c.add, "change": c.change, "destroy": c.destroy, "replace": c.replace,
                   "imported": c.imported, "moved": c.moved, "forget": c.forget, "read": c.read, "total": c.total},
        "drift_correction": drift_correction,
    }
    if with_changes:
        body["resource_changes"] = [change_variable(rc) for rc in plan.changed()]
    return body


def _holds(expression: str, variables: dict[str, Any]) -> bool:
    try:
        value = evaluate_cel(expression, variables)
    except CelError as exc:
        raise CelRuleError(str(exc)) from None
    if not isinstance(value, bool):
        raise CelRuleError(f"evaluated to {type(value).__name__}, not a bool")
    return value


def cel_violations(rule: CelRule, plan: PlanModel, drift_correction: bool) -> tuple[list[str], list[str]]:
    """(addresses, messages): resource scope names each changing resource for which the expression is false;
    plan scope gives a message and no address."""
    expression = rule.expression
    message = rule.message or f"the CEL expression is false: {rule.expression}"
    if rule.scope == "plan":
        ok = _holds(expression, {"plan": plan_variable(plan, drift_correction, with_changes=True)})
        return ([], []) if ok else ([], [message])
    plan_var = plan_variable(plan, drift_correction, with_changes=False)
    failed = [rc.address for rc in plan.changed()
              if not _holds(expression, {"change": change_variable(rc), "plan": plan_var})]
    return failed, [f"{address}: {message}" for address in failed]
