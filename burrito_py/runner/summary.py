"""The one-line summary of a plan, from `terraform show -json` (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NO_CHANGES = "No changes."


def plan_summary(plan: Mapping[str, Any]) -> str:
    add = change = destroy = 0
    for resource in plan.get("resource_changes") or ():
        actions = list((resource.get("change") or {}).get("actions") or ())
        if actions in (["create", "delete"], ["delete", "create"]):  # replace
            add += 1
            destroy += 1
        elif actions == ["create"]:
            add += 1
        elif actions == ["update"]:
            change += 1
        elif actions == ["delete"]:
            destroy += 1
    if add == change == destroy == 0:
        return NO_CHANGES
    return f"Plan: {add} to add, {change} to change, {destroy} to destroy"
