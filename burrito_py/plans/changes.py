"""What a plan would do, as one digest (pure; docs/architecture.md §5.1, §5.9).

Two plans of the same code and inputs have different sums even when they would make the same changes: the
binary plan carries the refreshed state, timestamps and Terraform's own bookkeeping. The layer decision needs to
know whether a new plan changes something compared with the one whose apply failed for good (an always-failing
apply must not be applied again at every drift check), so the controllers digest what the *apply* would do:

- each resource change that changes something (reads and no-ops are left out: a data source read happens on every
  plan and changes nothing), by address, with its previous address (a move), its raw actions (a replace is not an
  update), whether it imports, and the values it would set: every attribute of a create, and for an update or a
  replace only the attributes whose planned value differs from the current one, each with its planned value
  (`(known after apply)` when unknown). A delete or a forget is its address and actions alone;
- each root output that changes, by name and action (the model keeps no output values).

Left out on purpose: the values an attribute changes *from* (the refreshed state: a provider that reports a
server-side timestamp or counter would make every plan look new), `resource_drift` (changes outside Terraform
that need no action), the plan's timestamp, Terraform's version and the plan's other bookkeeping. Sensitive values
are already masked in the model, so a change of a sensitive value alone does not change the digest: such a fix
needs a new commit, changed upstream outputs, `sync-now` or an approval of the new plan.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from burrito_py.plans.model import PlanModel, ResourceChange

__all__ = ["UNKNOWN", "changes_digest", "planned_values"]

UNKNOWN = "(known after apply)"
REMOVED = "(removed)"
_MISSING = object()


def _key(part: str | int) -> str:
    return str(part).replace("~", "~0").replace("/", "~1")  # JSON pointer escaping: paths never collide


def _leaves(value: Any, unknown: Any, prefix: str, out: dict[str, Any]) -> None:
    """Flatten a value (with Terraform's `after_unknown` beside it) into JSON-pointer paths → leaf values."""
    if unknown is True:
        out[prefix] = UNKNOWN
        return
    if isinstance(value, dict) or isinstance(unknown, dict):
        values = value if isinstance(value, dict) else {}
        unknowns = unknown if isinstance(unknown, dict) else {}
        keys = set(values) | {k for k, v in unknowns.items() if v}
        if not keys:
            out[prefix] = {}
        for key in sorted(keys, key=str):
            _leaves(values.get(key), unknowns.get(key), f"{prefix}/{_key(key)}", out)
        return
    if isinstance(value, list) or isinstance(unknown, list):
        items = value if isinstance(value, list) else []
        unknowns_list = unknown if isinstance(unknown, list) else []
        length = max(len(items), len(unknowns_list))
        if not length:
            out[prefix] = []
        for i in range(length):
            _leaves(items[i] if i < len(items) else None, unknowns_list[i] if i < len(unknowns_list) else None,
                    f"{prefix}/{i}", out)
        return
    out[prefix] = value


def planned_values(change: ResourceChange) -> dict[str, Any]:
    """The values the apply would set on one resource: path → planned value (see the module doc)."""
    if change.action in ("delete", "forget", "no-op", "read"):
        return {}
    after: dict[str, Any] = {}
    _leaves(change.after, change.after_unknown, "", after)
    if change.action == "create":
        return after
    before: dict[str, Any] = {}
    _leaves(change.before, None, "", before)
    planned = {path: value for path, value in after.items() if before.get(path, _MISSING) != value}
    planned.update({path: REMOVED for path in before if path not in after})
    return planned


def changes_digest(plan: PlanModel) -> str:
    """`sha256:<hex>` of what applying `plan` would change: equal for two plans that would make the same
    changes, whatever their sums."""
    resources = [
        {
            "address": rc.address,
            "previous_address": rc.previous_address,
            "actions": list(rc.actions),
            "importing": rc.importing,
            "values": planned_values(rc),
        }
        for rc in sorted(plan.changed(), key=lambda rc: (rc.address, rc.previous_address or ""))
    ]
    outputs = sorted([o.name, o.action] for o in plan.output_changes if o.action != "no-op")
    document = json.dumps({"resources": resources, "outputs": outputs}, sort_keys=True, separators=(",", ":"),
                          default=str)
    return "sha256:" + hashlib.sha256(document.encode()).hexdigest()
