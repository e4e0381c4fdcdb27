"""The one-line summary of a plan, from `terraform show -json` (pure).

Counts as Terraform's own `Plan:` line does: a replace (`["delete", "create"]` or `["create", "delete"]`)
is one to add and one to destroy; `read` and `no-op` count for nothing; imports and forgets are named only
when there are some (`Plan: 1 to import, 0 to add, ...`, `..., 1 to forget`). No trailing period, as in
docs/architecture.md §3.

A plan whose only changes are to root outputs is *not* "No changes.": applying it records the new outputs in
the state (the AGL reads them), so it reads `Plan: 0 to add, 0 to change, 0 to destroy` and the layer
controller applies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["NO_CHANGES", "plan_summary"]

NO_CHANGES = "No changes."
_REPLACE = (["delete", "create"], ["create", "delete"])


def plan_summary(plan: Mapping[str, Any]) -> str:
    add = change = destroy = imported = forget = 0
    for resource in plan.get("resource_changes") or ():
        change_block = resource.get("change") or {}
        actions = list(change_block.get("actions") or ())
        if change_block.get("importing"):
            imported += 1
        if actions in _REPLACE:
            add += 1
            destroy += 1
        elif actions == ["create"]:
            add += 1
        elif actions == ["update"]:
            change += 1
        elif actions == ["delete"]:
            destroy += 1
        elif actions == ["forget"]:
            forget += 1
    outputs_change = any(
        list((output or {}).get("actions") or ()) not in ([], ["no-op"])
        for output in (plan.get("output_changes") or {}).values()
    )
    if not (add or change or destroy or imported or forget or outputs_change):
        return NO_CHANGES
    parts = [f"{imported} to import"] if imported else []
    parts += [f"{add} to add", f"{change} to change", f"{destroy} to destroy"]
    if forget:
        parts.append(f"{forget} to forget")
    return "Plan: " + ", ".join(parts)
