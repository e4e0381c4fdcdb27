"""Label and field selectors as kube-apiserver parses them (`?labelSelector=`, `?fieldSelector=`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s+\(([^()]*)\)$")
_EXISTS = re.compile(rf"^(!?)\s*({_KEY})$")
_EQUALITY = re.compile(rf"^({_KEY})\s*(==|=|!=)\s*([-A-Za-z0-9_.]*)$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str]

    def matches(self, labels: Mapping[str, Any]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if self.op == "exists":
            return present
        return not present


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        """ValueError with the real server's wording when the selector is malformed."""
        if not text or not text.strip():
            return cls()
        found: list[Requirement] = []
        for part in _split(text):
            if m := _SET.match(part):
                values = frozenset(v.strip() for v in m.group(4).split(",") if v.strip())
                found.append(Requirement(m.group(1), m.group(3), values))
            elif m := _EQUALITY.match(part):
                found.append(Requirement(m.group(1), "!=" if m.group(3) == "!=" else "=", frozenset([m.group(4)])))
            elif m := _EXISTS.match(part):
                found.append(Requirement(m.group(2), "!" if m.group(1) else "exists", frozenset()))
            else:
                raise ValueError(f"unable to parse requirement: {part!r}")
        return cls(tuple(found))

    def matches(self, labels: Mapping[str, Any] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[tuple[str, bool, str], ...] = ()  # (field, equal, value)

    @classmethod
    def parse(cls, text: str | None) -> FieldSelector:
        if not text or not text.strip():
            return cls()
        found: list[tuple[str, bool, str]] = []
        for part in _split(text):
            for op, equal in (("!=", False), ("==", True), ("=", True)):
                if op in part:
                    key, value = part.split(op, 1)
                    found.append((key.strip(), equal, value.strip()))
                    break
            else:
                raise ValueError(f"invalid selector: '{text}'; can't understand '{part}'")
        return cls(tuple(found))

    @property
    def fields(self) -> list[str]:
        return [f for f, _, _ in self.requirements]

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, f) == value) == equal for f, equal, value in self.requirements)

    def exact(self, name: str) -> str | None:
        """The value `field=value` pins, if any (lets lists use the name index)."""
        for f, equal, value in self.requirements:
            if f == name and equal:
                return value
        return None


@dataclass(frozen=True)
class Selection:
    labels: LabelSelector = LabelSelector()
    fields: FieldSelector = FieldSelector()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return self.labels.matches(obj["metadata"].get("labels")) and self.fields.matches(obj)
