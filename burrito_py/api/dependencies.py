"""A layer's dependencies read as a graph: the entries of `spec.dependsOn` and the Terragrunt `dependency`
blocks of its unit (the repository controller's `webhook.burrito-py.io/terragrunt` annotation, §9.1) resolved to
keys, and cycle detection. Below the controllers (their dependency decisions), the inventory's dependents index
and the pull request's affected layers, which all read the same graph."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from burrito_py.api.annotations import TERRAGRUNT

Key = tuple[str, str]  # (namespace, name), as in kube/inventory.py


@dataclass(frozen=True, slots=True)
class Dependency:
    """One upstream, resolved: its key and what is read from it. `inputs` become variables of the dependent;
    `watched` outputs are read by Terragrunt itself (`dependency.<name>.outputs.<output>`), so they only key
    the plan (`watch_all`: the whole outputs object is read)."""

    upstream: Key
    inputs: tuple[tuple[str, str], ...] = ()  # (variable, upstream output), sorted
    trigger_always: bool = False
    watched: tuple[str, ...] = ()  # sorted
    watch_all: bool = False

    @property
    def reads_outputs(self) -> bool:
        return bool(self.inputs or self.watched or self.watch_all)


def terragrunt_record(annotations: Mapping[str, str] | None) -> Mapping[str, Any]:
    """The layer's Terragrunt annotation as written by the repository controller ({} when none or unreadable)."""
    raw = (annotations or {}).get(TERRAGRUNT)
    if not raw:
        return {}
    try:
        record = json.loads(raw)
    except ValueError:
        return {}
    return record if isinstance(record, Mapping) else {}


def terragrunt_problems(annotations: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    """(reason, message) of what is wrong with the layer's Terragrunt unit: they stop its runs (§9.1)."""
    problems = terragrunt_record(annotations).get("problems")
    return tuple((str(p.get("reason") or "TerragruntConfigInvalid"), str(p.get("message") or ""))
                 for p in problems if isinstance(p, Mapping)) if isinstance(problems, list) else ()


def terragrunt_reads(annotations: Mapping[str, str] | None) -> tuple[str, ...]:
    """The files and module directories the layer's Terragrunt unit reads: a change to one concerns it (§8)."""
    reads = terragrunt_record(annotations).get("reads")
    return tuple(str(r) for r in reads if isinstance(r, str)) if isinstance(reads, list) else ()


def _terragrunt_dependencies(annotations: Mapping[str, str] | None, namespace: str) -> list[Dependency]:
    found = []
    entries = terragrunt_record(annotations).get("dependencies")
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, Mapping) or not entry.get("name"):
            continue
        outputs = entry.get("outputs", ())
        watch_all = outputs is None
        watched = tuple(sorted({str(o) for o in outputs})) if isinstance(outputs, list) else ()
        found.append(Dependency((namespace, str(entry["name"])), watched=watched, watch_all=watch_all))
    return found


def layer_dependencies(body: Mapping[str, Any], namespace: str | None = None) -> tuple[Dependency, ...]:
    """All of a layer's dependencies: `spec.dependsOn`, then its Terragrunt unit's, merged per upstream."""
    namespace = namespace or str((body.get("metadata") or {}).get("namespace") or "")
    found = {d.upstream: d for d in dependencies_of(body.get("spec") or {}, namespace)}
    for dep in _terragrunt_dependencies((body.get("metadata") or {}).get("annotations"), namespace):
        held = found.get(dep.upstream)
        if held is not None:
            dep = Dependency(dep.upstream, held.inputs, held.trigger_always,
                             tuple(sorted({*held.watched, *dep.watched})), held.watch_all or dep.watch_all)
        found[dep.upstream] = dep
    return tuple(found.values())


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
        on_path.difference_update(path[depth:])  # what the walk backs out of (not a new set per step: linear)
        del path[depth:]
        path.append(node)
        on_path.add(node)
        for up in upstreams_of.get(node, ()):
            if up == start:
                return (*path, start)
            if up not in on_path and up not in seen:
                seen.add(up)
                stack.append((up, depth + 1))
    return None
