"""One model of a plan, parsed once from `terraform show -json` / `tofu show -json` (pure).

It is the one source for the layer's `lastResult` (the runner's one-line summary), the plan policies, the drift
classification, notifications, and later PR comments and the UI. Values at sensitive paths (`before_sensitive`,
`after_sensitive`, sensitive outputs) are replaced by `MASK` as the plan is read, so nothing built from the model
can show them. The JSON format is Terraform's "JSON Output Format" (format_version 1.x), which OpenTofu keeps.

Missing optional fields take their defaults (old Terraform versions omit some); a field of the wrong type is a
`PlanFormatError` naming its path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from burrito_py.plans.attributes import AttributeChange, Budget, attribute_changes

__all__ = [
    "MASK",
    "NO_CHANGES",
    "Action",
    "Counts",
    "OutputChange",
    "PlanFormatError",
    "PlanModel",
    "ResourceChange",
    "is_summary_line",
    "parse_plan",
    "plan_summary",
]

MASK = "(sensitive value)"
NO_CHANGES = "No changes."
Action = Literal["create", "update", "delete", "replace", "read", "no-op", "forget"]
_SINGLE: dict[tuple[str, ...], Action] = {
    (): "no-op",
    ("no-op",): "no-op",
    ("create",): "create",
    ("update",): "update",
    ("delete",): "delete",
    ("read",): "read",
    ("forget",): "forget",
    ("delete", "create"): "replace",
    ("create", "delete"): "replace",
    # OpenTofu and Terraform ≥ 1.7 can forget an object while replacing it (a `removed` block with destroy off).
    ("create", "forget"): "replace",
    ("forget", "create"): "replace",
}


class PlanFormatError(ValueError):
    """The plan JSON is not what `show -json` writes: the message names the field and the reason."""


@dataclass(frozen=True, slots=True)
class ResourceChange:
    address: str
    previous_address: str | None
    module_address: str | None
    mode: str
    type: str
    name: str
    provider_name: str
    actions: tuple[str, ...]
    action: Action
    action_reason: str | None
    replace_paths: tuple[tuple[str | int, ...], ...]
    importing: bool
    before: Any
    after: Any
    after_unknown: Any
    # The attributes that change (plans/attributes.py), read only when asked (`parse_plan(..., attributes=True)`):
    # sensitive values already `Marker.SENSITIVE`. `attributes_cut`: how many more were found and not kept.
    attributes: tuple[AttributeChange, ...] = ()
    attributes_cut: int = 0

    @property
    def moved(self) -> bool:
        return self.previous_address is not None and self.previous_address != self.address

    @property
    def changes_something(self) -> bool:
        return _changes_something(self.action, self.importing, self.moved)

    def to_json(self) -> dict[str, Any]:
        """Terraform's own shape, masked (what CEL and Rego policies read)."""
        change: dict[str, Any] = {"actions": list(self.actions), "before": self.before, "after": self.after,
                                  "after_unknown": self.after_unknown}
        if self.replace_paths:
            change["replace_paths"] = [list(p) for p in self.replace_paths]
        if self.importing:
            change["importing"] = {}
        body: dict[str, Any] = {"address": self.address, "mode": self.mode, "type": self.type, "name": self.name,
                                "provider_name": self.provider_name, "change": change}
        if self.module_address:
            body["module_address"] = self.module_address
        if self.previous_address:
            body["previous_address"] = self.previous_address
        if self.action_reason:
            body["action_reason"] = self.action_reason
        return body


@dataclass(frozen=True, slots=True)
class OutputChange:
    name: str
    action: Action
    sensitive: bool


@dataclass(frozen=True, slots=True)
class Counts:
    add: int = 0
    change: int = 0
    destroy: int = 0
    replace: int = 0
    imported: int = 0
    moved: int = 0
    forget: int = 0
    read: int = 0
    changed: int = 0  # resources that change something (a replace, a move or an import counts once)

    @property
    def total(self) -> int:
        return self.changed


@dataclass(frozen=True, slots=True)
class PlanModel:
    format_version: str
    terraform_version: str
    resource_changes: tuple[ResourceChange, ...]
    resource_drift: tuple[ResourceChange, ...]
    output_changes: tuple[OutputChange, ...]
    counts: Counts
    errored: bool
    applyable: bool

    def summary(self) -> str:
        """Terraform's `Plan:` line, without the trailing period: a replace is one to add and one to destroy,
        reads and no-ops count for nothing, imports and forgets are named only when there are some. A plan
        whose only changes are to root outputs or moves is not "No changes." (applying it records them in the
        state)."""
        return _summary_line(self.counts, any(o.action != "no-op" for o in self.output_changes))

    @property
    def has_changes(self) -> bool:
        return self.summary() != NO_CHANGES

    def changed(self) -> tuple[ResourceChange, ...]:
        return tuple(rc for rc in self.resource_changes if rc.changes_something)

    def policy_input(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "terraform_version": self.terraform_version,
            "resource_changes": [rc.to_json() for rc in self.resource_changes],
            "resource_drift": [rc.to_json() for rc in self.resource_drift],
            "output_changes": {o.name: {"actions": _actions_of(o.action), "sensitive": o.sensitive}
                               for o in self.output_changes},
            "errored": self.errored,
            "applyable": self.applyable,
        }


def _actions_of(action: Action) -> list[str]:
    return ["delete", "create"] if action == "replace" else [action]


def parse_plan(data: bytes | str | Mapping[str, Any], *, attributes: bool = False, values: bool = True) -> PlanModel:
    """The plan model. `attributes`: also each resource change's attribute diff (what the pull request comment and
    the UI show; the controllers' reviews do without it and its memory). `values=False`: no `before`, `after` nor
    `after_unknown` (None), for a reader of the counts only (the runner's summary: masking every value of a
    1,000-resource plan costs it ~0.15 s)."""
    if isinstance(data, bytes | str):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise PlanFormatError(f"(document): not JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise PlanFormatError("(document): expected a JSON object")
    budget = Budget() if attributes else None
    changes = tuple(_resource(item, f"resource_changes[{i}]", budget, values)
                    for i, item in enumerate(_list(data, "resource_changes", "")))
    drift = tuple(_resource(item, f"resource_drift[{i}]", None, values)
                  for i, item in enumerate(_list(data, "resource_drift", "")))
    outputs = _outputs(data)
    return PlanModel(
        format_version=_str(data, "format_version", "", "") or "",
        terraform_version=_str(data, "terraform_version", "", "") or "",
        resource_changes=changes,
        resource_drift=drift,
        output_changes=outputs,
        counts=_count(changes),
        errored=bool(data.get("errored", False)),
        applyable=bool(data.get("applyable", True)),
    )


def plan_summary(data: Mapping[str, Any]) -> str:
    """`parse_plan(data).summary()` without building the model: only what the counts read (each resource change's
    actions, import and move, the outputs' actions), checked as `parse_plan` checks it. The runner's summary of a
    1,000-resource plan, in the attempt's critical path after `show -json`: ~1 ms instead of ~6."""
    if not isinstance(data, Mapping):
        raise PlanFormatError("(document): expected a JSON object")
    entries = []
    for i, item in enumerate(_list(data, "resource_changes", "")):
        where = f"resource_changes[{i}]"
        change, _, action = _change(item, where)
        address = _str(item, "address", where, "") or ""
        previous = _str(item, "previous_address", where, None)
        entries.append((action, bool(change.get("importing")), previous is not None and previous != address))
    return _summary_line(_tally(entries), any(o.action != "no-op" for o in _outputs(data)))


# Every line `_summary_line` writes, and nothing else: a runner's summary (tenant code may write it) is taken only so.
_SUMMARY_LINE = re.compile(r"No changes\.|Plan: (?:[0-9]+ to import, )?[0-9]+ to add, [0-9]+ to change, "
                           r"[0-9]+ to destroy(?:, [0-9]+ to forget)?")


def is_summary_line(text: str) -> bool:
    return _SUMMARY_LINE.fullmatch(text) is not None


def _summary_line(c: Counts, outputs_change: bool) -> str:
    # A move alone is a change too: Terraform says "Plan: 0 to add, 0 to change, 0 to destroy." and its apply
    # records the new address in the state.
    if not (c.add or c.change or c.destroy or c.imported or c.forget or c.moved or outputs_change):
        return NO_CHANGES
    parts = [f"{c.imported} to import"] if c.imported else []
    parts += [f"{c.add} to add", f"{c.change} to change", f"{c.destroy} to destroy"]
    if c.forget:
        parts.append(f"{c.forget} to forget")
    return "Plan: " + ", ".join(parts)


def _changes_something(action: Action, importing: bool, moved: bool) -> bool:
    return action not in ("no-op", "read") or moved or importing


def _count(changes: Sequence[ResourceChange]) -> Counts:
    return _tally((rc.action, rc.importing, rc.moved) for rc in changes)


def _tally(entries: Iterable[tuple[Action, bool, bool]]) -> Counts:
    """The counts of (action, importing, moved) for each resource change."""
    tally = dict.fromkeys(("add", "change", "destroy", "replace", "imported", "moved", "forget", "read", "changed"), 0)
    for action, importing, moved in entries:
        tally["imported"] += importing
        tally["moved"] += moved
        tally["changed"] += _changes_something(action, importing, moved)
        if action == "replace":
            tally["add"] += 1
            tally["destroy"] += 1
            tally["replace"] += 1
        elif action == "create":
            tally["add"] += 1
        elif action == "update":
            tally["change"] += 1
        elif action == "delete":
            tally["destroy"] += 1
        elif action == "forget":
            tally["forget"] += 1
        elif action == "read":
            tally["read"] += 1
    return Counts(**tally)


def _outputs(data: Mapping[str, Any]) -> tuple[OutputChange, ...]:
    outputs = data.get("output_changes")
    outputs = {} if outputs is None else outputs
    if not isinstance(outputs, Mapping):
        raise PlanFormatError("output_changes: expected an object of output name → change")
    return tuple(_output(name, change) for name, change in sorted(outputs.items()))


def _change(item: Any, where: str) -> tuple[Mapping[str, Any], tuple[str, ...], Action]:
    """A resource change's `change` object and its actions, checked."""
    if not isinstance(item, Mapping):
        raise PlanFormatError(f"{where}: expected an object")
    change = item.get("change") or {}
    if not isinstance(change, Mapping):
        raise PlanFormatError(f"{where}.change: expected an object")
    return (change, *_actions(change, f"{where}.change"))


def _resource(item: Any, where: str, budget: Budget | None = None, values: bool = True) -> ResourceChange:
    change, actions, action = _change(item, where)
    replace_paths = change.get("replace_paths") or []
    if not isinstance(replace_paths, list) or not all(isinstance(p, list) for p in replace_paths):
        raise PlanFormatError(f"{where}.change.replace_paths: expected a list of paths (lists)")
    # From the raw values (a sensitive value that changed is told from one that did not), never keeping them.
    attributes, cut = attribute_changes(change, budget) if budget is not None and action in (
        "create", "update", "replace") else ((), 0)
    return ResourceChange(
        address=_str(item, "address", where, "") or "",
        previous_address=_str(item, "previous_address", where, None),
        module_address=_str(item, "module_address", where, None),
        mode=_str(item, "mode", where, "managed") or "managed",
        type=_str(item, "type", where, "") or "",
        name=_str(item, "name", where, "") or "",
        provider_name=_str(item, "provider_name", where, "") or "",
        actions=actions,
        action=action,
        action_reason=_str(item, "action_reason", where, None),
        replace_paths=tuple(tuple(cast(list[str | int], p)) for p in replace_paths),
        importing=bool(change.get("importing")),
        before=mask(change.get("before"), change.get("before_sensitive")) if values else None,
        after=mask(change.get("after"), change.get("after_sensitive")) if values else None,
        after_unknown=change.get("after_unknown") if values else None,
        attributes=attributes,
        attributes_cut=cut,
    )


def _output(name: Any, change: Any) -> OutputChange:
    where = f"output_changes[{name!r}]"
    if not isinstance(change, Mapping):
        raise PlanFormatError(f"{where}: expected an object")
    _, action = _actions(change, where)
    sensitive = bool(change.get("before_sensitive") or change.get("after_sensitive"))
    return OutputChange(str(name), action, sensitive)


def _actions(change: Mapping[str, Any], where: str) -> tuple[tuple[str, ...], Action]:
    actions = change.get("actions") or []
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise PlanFormatError(f"{where}.actions: expected a list of strings")
    action = _SINGLE.get(tuple(actions))
    if action is None:
        raise PlanFormatError(f"{where}.actions: unknown combination {actions}")
    return tuple(actions), action


def mask(value: Any, sensitive: Any) -> Any:
    """`value` with every part that `sensitive` (Terraform's mirror structure of booleans) marks replaced."""
    if sensitive is True:
        return MASK if value is not None else None
    if isinstance(value, Mapping) and isinstance(sensitive, Mapping):
        return {k: mask(v, sensitive.get(k)) for k, v in value.items()}
    if isinstance(value, list) and isinstance(sensitive, list):
        return [mask(v, sensitive[i] if i < len(sensitive) else None) for i, v in enumerate(value)]
    return value


def _list(data: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = data.get(key)
    value = [] if value is None else value
    if not isinstance(value, list):
        raise PlanFormatError(f"{where + '.' if where else ''}{key}: expected a list")
    return value


def _str(data: Mapping[str, Any], key: str, where: str, default: str | None) -> str | None:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise PlanFormatError(f"{where + '.' if where else ''}{key}: expected a string, got {type(value).__name__}")
    return value
