"""The built-in rule kinds (pure): each returns the addresses it denies, or None when it does not apply."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from burrito_py.api.policy import PlanPolicyRule
from burrito_py.plans.model import PlanModel, ResourceChange

__all__ = ["builtin_violations"]


def _matches(type_: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(type_, glob) for glob in globs)


def _deletes(rc: ResourceChange) -> bool:
    return "delete" in rc.actions


def builtin_violations(rule: PlanPolicyRule, plan: PlanModel, drift_correction: bool) -> tuple[list[str], list[str]]:
    """(addresses, messages) of what `rule` (a built-in kind) finds; both empty when the plan passes. Only
    resources that change something are judged; data-source reads never are."""
    changing = plan.changed()
    found: list[ResourceChange] = []
    if rule.no_destroy is not None:
        globs = rule.no_destroy.types
        found = [rc for rc in changing if _deletes(rc) and (not globs or _matches(rc.type, globs))]
        return [rc.address for rc in found], [f"{rc.address} would be {rc.action}d" for rc in found]
    if rule.no_replace is not None:
        globs = rule.no_replace.types
        found = [rc for rc in changing if rc.action == "replace" and (not globs or _matches(rc.type, globs))]
        return ([rc.address for rc in found],
                [f"{rc.address} would be replaced ({rc.action_reason or 'no reason given'})" for rc in found])
    if rule.deny_types is not None:
        found = [rc for rc in changing if _matches(rc.type, rule.deny_types)]
        return [rc.address for rc in found], [f"{rc.address}: type {rc.type} is denied" for rc in found]
    if rule.allow_types is not None:
        found = [rc for rc in changing if not _matches(rc.type, rule.allow_types)]
        return [rc.address for rc in found], [f"{rc.address}: type {rc.type} is not allowed" for rc in found]
    if rule.drift_update_only is not None:
        if not drift_correction:
            return [], []
        found = [rc for rc in changing if rc.action != "update"]
        return ([rc.address for rc in found],
                [f"{rc.address}: a drift correction may only update in place, not {rc.action}" for rc in found])
    if rule.max_changes is not None:
        limit = rule.max_changes
        deletions = sum(1 for rc in changing if _deletes(rc))
        messages = []
        if limit.total is not None and len(changing) > limit.total:
            messages.append(f"{len(changing)} resources change, more than {limit.total}")
        if limit.delete is not None and deletions > limit.delete:
            messages.append(f"{deletions} resources are deleted or replaced, more than {limit.delete}")
        return [], messages
    raise ValueError(f"rule {rule.name!r} is not a built-in kind")
