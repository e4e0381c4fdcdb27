"""A layer's `spec.dependsOn` read as a graph: its entries resolved to keys, and cycle detection. Below the
controllers (their dependency decisions), the inventory's dependents index and the pull request's affected
layers, which all read the same graph."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Key = tuple[str, str]  # (namespace, name), as in kube/inventory.py


@dataclass(frozen=True, slots=True)
class Dependency:
    """One entry of `spec.dependsOn`, resolved: the upstream's key and what is read from it."""

    upstream: Key
    inputs: tuple[tuple[str, str], ...] = ()  # (variable, upstream output), sorted
    trigger_always: bool = False


def dependencies_of(spec: Mapping[str, Any], namespace: str) -> tuple[Dependency, ...]:
    """`spec.dependsOn` as keys (the namespace defaults to the dependent's); duplicates merged in order."""
    found: dict[Key, Dependency] = {}
    for entry in spec.get("dependsOn") or ():
        if not isinstance(entry, Mapping) or not entry.get("name"):
            continue
        key = (str(entry.get("namespace") or namespace), str(entry["name"]))
        inputs = tuple(sorted((str(k), str(v)) for k, v in (entry.get("inputs") or {}).items()))
        held = found.get(key)
        if held is not None:
            inputs = tuple(sorted({*held.inputs, *inputs}))
        found[key] = Dependency(key, inputs, bool(entry.get("triggerAlways")) or (held is not None
                                                                                  and held.trigger_always))
    return tuple(found.values())


def find_cycle(start: Key, upstreams_of: Mapping[Key, Sequence[Key]]) -> tuple[Key, ...] | None:
    """A cycle through `start` in the dependency graph (`start`, …, `start`), or None. Depth-first over the
    upstream edges; a self-dependency is a cycle of one."""
    stack: list[tuple[Key, int]] = [(start, 0)]
    path: list[Key] = []
    on_path: set[Key] = set()
    seen: set[Key] = set()
    while stack:
        node, depth = stack.pop()
        del path[depth:]
        on_path = set(path)
        path.append(node)
        on_path.add(node)
        for up in upstreams_of.get(node, ()):
            if up == start:
                return (*path, start)
            if up not in on_path and up not in seen:
                seen.add(up)
                stack.append((up, depth + 1))
    return None
