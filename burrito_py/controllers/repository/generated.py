"""Layers generated from a repository's Terragrunt units (`spec.layersFromUnits`, docs/architecture.md §9.1).
Pure: the repository, the units found under the path at the branch head, and the layers of its namespace in; what
to create, change and delete out.

- One layer per unit, named `<prefix><unit path with '/' as '-'>` (lower case; anything else than `[a-z0-9-]`
  becomes `-`; a name longer than 63 characters, or already taken by another unit's, ends with `-` and 8 hex of
  the path's sha256), labelled `burrito-py.io/generated-by: <repository>`, annotated with its unit, owned by the
  repository (an owner reference, `controller: true`).
- Its spec: the repository, the branch, the unit's path, Terragrunt enabled, and `autoApply`,
  `destroyResourcesOnDeletion` when set (else the repository's defaults apply). A generated layer whose spec
  differs from that is patched back to it (the settings changed); other fields a person added are left alone.
- A layer the repository owns whose unit is gone (or, with `layersFromUnits` removed, every one) is deleted:
  its own `destroyResourcesOnDeletion` decides whether its resources are destroyed first (§5.7).
- A name held by a layer the repository does not own is not taken over: the unit is reported
  (`LayersGenerated=False, NameTaken`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.kube.conditions import Cond

Body = Mapping[str, Any]
LABEL_GENERATED_BY = "burrito-py.io/generated-by"
UNIT_ANNOTATION = "burrito-py.io/unit"
CONDITION = "LayersGenerated"
MAX_NAME = 63  # layer names end up in label values


@dataclass(frozen=True, slots=True)
class GeneratedLayers:
    create: tuple[Body, ...] = ()
    patch: tuple[tuple[str, Body], ...] = ()  # (layer name, merge patch)
    delete: tuple[str, ...] = ()
    condition: Cond | None = None  # None: the repository generates no layers (and owns none)
    units: tuple[str, ...] = field(default=())


def owns(repository: Body, layer: Body) -> bool:
    uid = repository["metadata"].get("uid")
    return bool(uid) and any(ref.get("uid") == uid and ref.get("kind") == "TerraformRepository"
                             for ref in layer["metadata"].get("ownerReferences") or ())


def layer_name(prefix: str, unit: str, taken: bool = False) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", (unit or "root").lower()).strip("-") or "root"
    name = f"{prefix}{slug}"
    if len(name) <= MAX_NAME and not taken:
        return name
    digest = hashlib.sha256(unit.encode()).hexdigest()[:8]
    return f"{prefix}{slug[:MAX_NAME - len(prefix) - 9].rstrip('-')}-{digest}"


def _prefix(repository: Body, settings: Mapping[str, Any]) -> str:
    prefix = settings.get("namePrefix")
    return str(prefix) if prefix is not None else f"{repository['metadata']['name'][:40]}-"


def desired_spec(repository: Body, settings: Mapping[str, Any], unit: str) -> dict[str, Any]:
    """What a generated layer's spec holds. `autoApply` and `destroyResourcesOnDeletion` only when set, so the
    repository's own defaults (its remediationStrategy) apply otherwise."""
    spec: dict[str, Any] = {
        "repository": {"name": repository["metadata"]["name"]},
        "branch": settings["branch"],
        "path": unit or ".",
        "terragrunt": {"enabled": True},
    }
    if settings.get("autoApply") is not None:
        spec["remediationStrategy"] = {"autoApply": bool(settings["autoApply"])}
    if settings.get("destroyResourcesOnDeletion") is not None:
        spec["destroyResourcesOnDeletion"] = bool(settings["destroyResourcesOnDeletion"])
    return spec


def _differs(wanted: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    for key, value in wanted.items():
        if isinstance(value, Mapping):
            if not isinstance(actual.get(key), Mapping) or _differs(value, actual[key]):
                return True
        elif actual.get(key) != value:
            return True
    return False


def decide_generated_layers(repository: Body, units: Sequence[str] | None, layers: Sequence[Body],
                            names: frozenset[str] = frozenset()) -> GeneratedLayers:
    """`units`: the units under the path at the branch head (None: the head is not known, so nothing is created
    nor deleted). `layers`: the layers following the repository; `names`: every layer name of its namespace."""
    settings = (repository.get("spec") or {}).get("layersFromUnits")
    owned = {layer["metadata"]["name"]: layer for layer in layers if owns(repository, layer)}
    if not settings:
        gone = tuple(sorted(n for n, body in owned.items() if not body["metadata"].get("deletionTimestamp")))
        disabled = Cond(CONDITION, False, "Disabled", f"deleting {len(gone)} generated layer(s)")
        return GeneratedLayers(delete=gone, condition=disabled if gone else None)
    if units is None:
        return GeneratedLayers(condition=Cond(CONDITION, False, "BranchNotFound",
                                              f"branch {settings['branch']!r} of spec.layersFromUnits is not known"))
    prefix = _prefix(repository, settings)
    by_unit = {str((layer["metadata"].get("annotations") or {}).get(UNIT_ANNOTATION)): name
               for name, layer in owned.items()}
    others = ({layer["metadata"]["name"] for layer in layers} | names) - set(owned)
    create: list[Body] = []
    patches: list[tuple[str, Body]] = []
    taken: list[str] = []
    used: set[str] = set(owned)
    for unit in units:
        spec = desired_spec(repository, settings, unit)
        name = by_unit.get(unit)
        if name is not None:
            if _differs(spec, owned[name].get("spec") or {}):
                patches.append((name, {"spec": spec}))
            continue
        name = layer_name(prefix, unit)
        if name in used or name in others:
            name = layer_name(prefix, unit, taken=True)
        if name in used or name in others:
            taken.append(unit)
            continue
        used.add(name)
        meta = repository["metadata"]
        create.append({
            "apiVersion": ann.API_VERSION, "kind": "TerraformLayer",
            "metadata": {
                "name": name, "namespace": meta["namespace"],
                "labels": {LABEL_GENERATED_BY: meta["name"]},
                "annotations": {UNIT_ANNOTATION: unit},
                "ownerReferences": [{"apiVersion": repository.get("apiVersion", ann.API_VERSION),
                                     "kind": "TerraformRepository", "name": meta["name"], "uid": meta.get("uid", ""),
                                     "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": spec,
        })
    wanted = set(units)
    delete = tuple(sorted(name for unit, name in by_unit.items()
                          if unit not in wanted and not owned[name]["metadata"].get("deletionTimestamp")))
    where = settings.get("path") or "."
    if taken:
        condition = Cond(CONDITION, False, "NameTaken", f"no layer for unit(s) {', '.join(taken)}: their names are "
                         "held by layers this repository does not own")
    else:
        condition = Cond(CONDITION, True, "Generated", f"{len(units)} unit(s) under {where}")
    return GeneratedLayers(tuple(create), tuple(patches), delete, condition, tuple(units))
