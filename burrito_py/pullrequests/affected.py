"""Which layers a pull request affects (pure; issue 15 item 2).

The changed paths come from our own mirror (`GitMirror.pull_request_changes`: head against its merge base with
the base branch), never from a provider's file list, so there is no cap (GitHub lists at most 3,000 files). A
layer is affected when it follows the pull request's repository and base branch and the change touches its path
or an `additionalTriggerPaths` entry, with the relevance rules of pushes (`gitops.paths.is_relevant`: whole path
components, deletions, both sides of renames). A layer that depends (`spec.dependsOn`, transitively) on an
affected one is listed as downstream: informational, it is not planned for the pull request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from burrito_py.api.dependencies import layer_dependencies, terragrunt_reads
from burrito_py.git.paths import Change, is_relevant

Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Affected:
    layers: tuple[Key, ...]  # planned for the pull request, sorted
    downstream: tuple[Key, ...]  # depend on one of them; shown, not planned, sorted


def _key(layer: Mapping[str, Any]) -> Key:
    return str(layer["metadata"].get("namespace") or ""), str(layer["metadata"]["name"])


def _follows(layer: Mapping[str, Any], repository: Key, base: str) -> bool:
    spec = layer.get("spec") or {}
    ref = spec.get("repository") or {}
    namespace = ref.get("namespace") or layer["metadata"].get("namespace")
    return (namespace, ref.get("name")) == repository and spec.get("branch") == base


def layer_inputs(layer: Mapping[str, Any]) -> tuple[str, ...]:
    """Every path the layer reads, as relevance knows them: its path, its `additionalTriggerPaths` and what its
    Terragrunt unit reads (its includes and local module). A change to one of them concerns the layer; after a merge
    they are what is compared with the reviewed head (controllers/layer/reviewed.py)."""
    spec = layer.get("spec") or {}
    return (str(spec.get("path", "")), *(str(p) for p in spec.get("additionalTriggerPaths") or ()),
            *terragrunt_reads(layer["metadata"].get("annotations")))


def affected_layers(changes: Sequence[Change], layers: Iterable[Mapping[str, Any]], repository: Key,
                    base: str) -> Affected:
    """The layers of `repository` following `base` that `changes` touch, and the layers downstream of them."""
    held = list(layers)
    touched = {
        _key(layer) for layer in held
        if _follows(layer, repository, base) and not layer["metadata"].get("deletionTimestamp")
        and is_relevant(changes, layer_inputs(layer)[0], layer_inputs(layer)[1:])
    }
    dependents: dict[Key, set[Key]] = {}
    for layer in held:
        key = _key(layer)
        for dependency in layer_dependencies(layer, key[0]):
            dependents.setdefault(dependency.upstream, set()).add(key)
    downstream: set[Key] = set()
    frontier = list(touched)
    while frontier:
        for dependent in dependents.get(frontier.pop(), ()):
            if dependent not in touched and dependent not in downstream:
                downstream.add(dependent)
                frontier.append(dependent)
    return Affected(tuple(sorted(touched)), tuple(sorted(downstream)))
