"""What the repository controller writes on each Terragrunt layer of a branch: its unit's analysis at the head
(git/terragrunt.py) with every upstream unit mapped to the layers that follow it (docs/architecture.md §9.1).
Pure.

The value is the layer's `webhook.burrito-py.io/terragrunt` annotation, written with its `branch-commit`:
- `dependencies`: one entry per layer following an upstream unit (same repository, branch and namespace), with
  the unit, the `dependency` block and the outputs the unit reads (null: all). The layer controller reads them
  as it reads `spec.dependsOn` (ordering, the outputs digest, cycles: §5.11).
- `reads`: the files and module directories the unit reads; the repository controller adds them to the layer's
  trigger paths (§8), so an edit to `root.hcl` plans every unit including it.
- `problems`: the unit's problems, plus `DependencyNotFound` for an upstream unit no layer follows. Each stops
  the layer's runs with its reason (§5.11).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from burrito_py.git.paths import normalize_repo_path
from burrito_py.git.terragrunt import NOT_FOUND, Problem, TerragruntTree, UnitAnalysis, analyze_unit

Body = Mapping[str, Any]


def terragrunt_enabled(layer: Body, repository: Body | None) -> bool:
    """`spec.terragrunt.enabled` of the layer, else of its repository (api/effective.py's rule)."""
    for spec in ((layer.get("spec") or {}), ((repository or {}).get("spec") or {})):
        enabled = (spec.get("terragrunt") or {}).get("enabled")
        if enabled is not None:
            return bool(enabled)
    return False


@dataclass(frozen=True, slots=True)
class LayerTerragrunt:
    """One layer's annotation value (None: the layer is no Terragrunt layer, remove it) and its trigger paths."""

    annotation: str | None
    reads: tuple[str, ...] = ()


def _path(layer: Body) -> str | None:
    try:
        return normalize_repo_path(str((layer.get("spec") or {}).get("path", "")))
    except ValueError:
        return None


def _record(analysis: UnitAnalysis, namespace: str, followers: Mapping[tuple[str, str], Sequence[str]]) -> str:
    problems = set(analysis.problems)
    dependencies = []
    for dep in analysis.dependencies:
        names = followers.get((namespace, dep.path), ())
        if not names:
            problems.add(Problem(NOT_FOUND, f"{analysis.path or '.'}/terragrunt.hcl: dependency \"{dep.name}\": no "
                                 f"layer of this repository, branch and namespace follows the unit {dep.path}"))
        for name in names:
            dependencies.append({"name": name, "unit": dep.path, "block": dep.name,
                                 "outputs": None if dep.outputs is None else list(dep.outputs)})
    record = {
        "unit": analysis.path,
        "dependencies": dependencies,
        "reads": list(analysis.reads),
        "problems": [{"reason": p.reason, "message": p.message} for p in sorted(problems)],
    }
    if analysis.unresolved:
        record["unresolved"] = list(analysis.unresolved)
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def decide_terragrunt(tree: TerragruntTree | None, layers: Sequence[Body], repository: Body | None
                      ) -> dict[tuple[str, str], LayerTerragrunt]:
    """Per layer (namespace, name) of one branch: its annotation and trigger paths. `tree` is the branch head's
    (None only when no layer has Terragrunt enabled: then every value is None)."""
    followers: dict[tuple[str, str], list[str]] = {}
    for layer in layers:
        path = _path(layer)
        if path is not None and not layer["metadata"].get("deletionTimestamp"):
            followers.setdefault((layer["metadata"]["namespace"], path), []).append(layer["metadata"]["name"])
    for names in followers.values():
        names.sort()
    decided: dict[tuple[str, str], LayerTerragrunt] = {}
    analyses: dict[str, UnitAnalysis] = {}
    for layer in layers:
        meta = layer["metadata"]
        key = (meta["namespace"], meta["name"])
        path = _path(layer)
        if tree is None or path is None or not terragrunt_enabled(layer, repository):
            decided[key] = LayerTerragrunt(None)
            continue
        if path not in analyses:
            analyses[path] = analyze_unit(tree, path)
        analysis = analyses[path]
        decided[key] = LayerTerragrunt(_record(analysis, key[0], followers), analysis.reads)
    return decided
