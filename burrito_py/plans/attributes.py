"""Attribute-level diffs of a plan's resource changes (pure; docs/architecture.md §5.9, issue 30 item 7).

`attribute_changes` walks one resource change of `terraform show -json` — `before`, `after`, `after_unknown`,
`before_sensitive`, `after_sensitive`, `replace_paths` — and returns the attributes that differ, flattened to paths
(`tags.Name`, `ingress[0].cidr_blocks[1]`, `tags["kubernetes.io/role"]`), each with its value before and after.
Unchanged attributes are left out; null and absent are the same (Terraform treats them so).

- A value Terraform marks sensitive on either side (`before_sensitive` / `after_sensitive`, a whole subtree when the
  marker is `true`) is `Marker.SENSITIVE` on both sides: the raw values are compared to tell whether it changed, and
  never leave this module. A sensitive map is one attribute: its keys are not shown either.
- A value unknown until the apply (`after_unknown`) is `Marker.UNKNOWN`.
- An attribute is marked `forces_replace` when it lies under, or holds, one of Terraform's `replace_paths`.

The parse keeps at most `MAX_PER_RESOURCE` attribute changes of a resource and `MAX_PER_PLAN` of a plan
(`Budget`): the rest are counted (`attributes_cut`), never stored, so a plan's model stays within a few times its
JSON whatever its shape. `display` writes a value for people: JSON, with control, format (bidirectional) and
separator characters escaped so a value cannot reorder or break the line it is shown on, cut at `max_chars`.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

__all__ = [
    "MAX_PER_PLAN",
    "MAX_PER_RESOURCE",
    "AttributeChange",
    "Budget",
    "Marker",
    "attribute_changes",
    "display",
    "one_line",
    "path_text",
]

MAX_PER_RESOURCE = 200
MAX_PER_PLAN = 20_000
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


class Marker(enum.Enum):
    """What stands for a value that is not shown. Rendered unquoted, so no string value can pass for one."""

    SENSITIVE = "(sensitive)"
    UNKNOWN = "(known after apply)"


# A leaf: a scalar, null/absent (None), a marker, or an empty map or list (or, where a map meets a scalar, the map).
Leaf = str | int | float | bool | None | Marker | dict[str, Any] | list[Any]


@dataclass(frozen=True, slots=True)
class AttributeChange:
    steps: tuple[str | int, ...]  # map keys and list indices from the resource's top (rendered by `path`)
    before: Leaf
    after: Leaf
    forces_replace: bool = False

    @property
    def path(self) -> str:
        return path_text(self.steps)

    @property
    def kind(self) -> str:
        """`add` (nothing before), `remove` (nothing after) or `change`."""
        if self.before is None:
            return "add"
        if self.after is None:
            return "remove"
        return "change"


class Budget:
    """How many attribute changes a parse may still keep (`MAX_PER_PLAN` over the whole plan)."""

    def __init__(self, left: int = MAX_PER_PLAN) -> None:
        self.left = left


def attribute_changes(change: Mapping[str, Any], budget: Budget | None = None,
                      per_resource: int = MAX_PER_RESOURCE) -> tuple[tuple[AttributeChange, ...], int]:
    """(the attribute changes kept, how many more were found and not kept) of one `change` object of
    `resource_changes[]`: see the module's docstring."""
    replace_paths = [tuple(p) for p in change.get("replace_paths") or () if isinstance(p, list)]
    walker = _Walker(replace_paths, min(per_resource, budget.left if budget is not None else per_resource))
    before, after = change.get("before"), change.get("after")
    try:
        walker.walk((), {} if before is None else before, {} if after is None else after,
                    change.get("after_unknown"), change.get("before_sensitive"), change.get("after_sensitive"))
    except RecursionError:  # nested nearly as deep as the JSON parser allows: counted, not shown
        return (), len(walker.kept) + walker.cut + 1
    if budget is not None:
        budget.left -= len(walker.kept)
    return tuple(walker.kept), walker.cut


class _Walker:
    def __init__(self, replace_paths: Sequence[tuple[Any, ...]], keep: int) -> None:
        self.replace_paths = replace_paths
        self.keep = max(keep, 0)
        self.kept: list[AttributeChange] = []
        self.cut = 0

    def emit(self, steps: tuple[str | int, ...], before: Leaf, after: Leaf) -> None:
        if len(self.kept) >= self.keep:
            self.cut += 1
            return
        forces = any(steps[:len(p)] == p or p[:len(steps)] == steps for p in self.replace_paths)
        self.kept.append(AttributeChange(steps, before, after, forces))

    def walk(self, steps: tuple[str | int, ...], before: Any, after: Any, unknown: Any, before_sensitive: Any,
             after_sensitive: Any) -> None:
        if before_sensitive is True or after_sensitive is True:
            # Compared raw, shown masked on both sides; unknown reveals nothing, null only that there is no value.
            if unknown is True or not _same(before, after):
                self.emit(steps, None if before is None else Marker.SENSITIVE,
                          Marker.UNKNOWN if unknown is True else None if after is None else Marker.SENSITIVE)
            return
        if unknown is True:
            after = Marker.UNKNOWN
            unknown = None
        if after is None and isinstance(unknown, dict | list) and unknown:
            after = {} if isinstance(unknown, dict) else []
        # A map or list added or removed whole: each of its values against nothing (a map that becomes unknown is
        # one attribute, below, as Terraform shows it; an empty one added or removed too).
        if before is None and isinstance(after, dict | list) and (after or unknown):
            before = type(after)()
        if after is None and isinstance(before, dict | list) and before:
            after = type(before)()
        if isinstance(before, dict) and isinstance(after, dict):
            keys = set(before) | set(after)
            if isinstance(unknown, dict):
                keys |= {k for k, v in unknown.items() if v}
            for key in sorted(keys, key=str):
                self.walk((*steps, str(key)), before.get(key), after.get(key), _child(unknown, key),
                          _child(before_sensitive, key), _child(after_sensitive, key))
            return
        if isinstance(before, list) and isinstance(after, list):
            length = max(len(before), len(after), len(unknown) if isinstance(unknown, list) else 0)
            for i in range(length):
                self.walk((*steps, i), before[i] if i < len(before) else None, after[i] if i < len(after) else None,
                          _child(unknown, i), _child(before_sensitive, i), _child(after_sensitive, i))
            return
        if not _same(before, after):
            # Leaves, empty containers, or a map against a scalar (a dynamic attribute changing type).
            self.emit(steps, _shown(before, before_sensitive), _shown(after, after_sensitive))


def _child(marker: Any, key: str | int) -> Any:
    """The part of a mirror structure (`after_unknown`, `*_sensitive`) for one key or index."""
    if isinstance(marker, dict) and isinstance(key, str):
        return marker.get(key)
    if isinstance(marker, list) and isinstance(key, int):
        return marker[key] if key < len(marker) else None
    return None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and bool(a == b)


def _shown(value: Any, sensitive: Any) -> Leaf:
    """A leaf as shown: a container (one that met a scalar) with its sensitive parts masked."""
    if isinstance(value, dict | list) and value and sensitive:
        return cast(Leaf, _masked(value, sensitive))
    return cast(Leaf, value)


def _masked(value: Any, sensitive: Any) -> Any:
    if sensitive is True:
        return Marker.SENSITIVE.value
    if isinstance(value, dict):
        return {k: _masked(v, _child(sensitive, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, _child(sensitive, i)) for i, v in enumerate(value)]
    return value


def path_text(steps: Sequence[str | int]) -> str:
    """`tags.Name`, `ingress[0].cidr_blocks[1]`; a key that is not an identifier is quoted: `tags["a.b"]`."""
    out = ""
    for step in steps:
        if isinstance(step, int):
            out += f"[{step}]"
        elif _IDENTIFIER.fullmatch(step):
            out += f".{step}" if out else step
        else:
            out += f"[{_quoted(step)}]"
    return out or "(the whole value)"


def _escape(text: str) -> str:
    """`text` with every character that could hide, reorder or break what surrounds it written as an escape: those
    Python does not call printable (control, format such as bidirectional overrides, line and paragraph separators,
    spaces other than " ", surrogates, private use, unassigned)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else (f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}")
                   for c in text)


def one_line(text: str) -> str:
    """`text` (an address, a key) safe to show on one line: see `_escape`."""
    return _escape(text)


def _quoted(text: str) -> str:
    return _escape(json.dumps(text, ensure_ascii=False))


def display(value: Leaf, max_chars: int = 200) -> str:
    """A value as people read it: a marker bare, anything else as JSON (escaped), cut to `max_chars`."""
    if isinstance(value, Marker):
        return value.value
    if isinstance(value, str):
        if len(value) <= max_chars:
            return _quoted(value)
        return f"{_quoted(value[:max_chars])}… ({len(value):,} characters)"
    try:
        text = _escape(json.dumps(value, ensure_ascii=False, sort_keys=True, default=str, separators=(",", ":")))
    except RecursionError:
        return "(too deeply nested to show)"
    return text if len(text) <= max_chars else f"{text[:max_chars]}… ({len(text):,} characters)"
