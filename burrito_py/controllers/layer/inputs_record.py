"""The pure half of a run's inputs record (run_inputs.py has the reads and the write): the varsFrom values
resolved from the objects read, the upstream outputs, and the record they make (docs/architecture.md §9,
§5.11). The layer's and the pull request's runs build theirs with it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from burrito_py.api.layer import VarsSource
from burrito_py.api.runner_secrets import refusal
from burrito_py.runner.variables import VariablesError, source_values


@dataclass(frozen=True, slots=True)
class Sources:
    """The varsFrom values in order, the names that came from a Secret, and why they are incomplete."""

    values: tuple[Mapping[str, str], ...] = ()
    secret_names: frozenset[str] = frozenset()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Upstream:
    """The upstream outputs a run consumes (dependencies), as `dependencies.inputs_record` made them."""

    digest: str | None = None
    variables: Mapping[str, Any] = field(default_factory=dict)
    sensitive: tuple[str, ...] = ()


Read = Mapping[str, Any] | None | str  # the object, None (absent), or why it could not be read


def resolve_sources(vars_from: Sequence[Mapping[str, Any]], namespace: str, objects: Sequence[Read]) -> Sources:
    """Pure: each varsFrom entry's values from the object read for it (`objects[i]`). A Secret whose writers did
    not open it to runners (api/runner_secrets.py) is the record's error, as a missing one is."""
    values: list[Mapping[str, str]] = []
    secret: set[str] = set()
    for index, (entry, obj) in enumerate(zip(vars_from, objects, strict=True)):
        if isinstance(obj, str):  # why it was not read (refused, or a name that is not one): the more precise
            return Sources(tuple(values), frozenset(secret), f"spec.varsFrom[{index}]: {obj}")
        try:
            source = VarsSource.model_validate(entry)
        except ValidationError:
            return Sources(tuple(values), frozenset(secret), f"spec.varsFrom[{index}] is invalid")
        if source.kind == "Secret" and obj is not None:  # a missing one is for `optional` to judge
            closed = refusal(namespace, source.name, f"spec.varsFrom[{index}]", obj)
            if closed is not None:
                return Sources(tuple(values), frozenset(secret), closed)
        try:
            found = source_values(source, namespace, index, obj)
        except VariablesError as exc:  # names kind, namespace, name and key, never a value
            return Sources(tuple(values), frozenset(secret), str(exc))
        values.append(found)
        secret = (secret - set(found)) | (set(found) if source.kind == "Secret" else set())
    return Sources(tuple(values), frozenset(secret))


def build_record(sources: Sources, upstream: Upstream) -> dict[str, Any]:
    """Pure: the record (see the module docstring). A variable set by an upstream output is not from a Secret."""
    variables: dict[str, Any] = {}
    for values in sources.values:
        variables.update(values)
    variables.update(upstream.variables)
    secret = sorted(name for name in sources.secret_names if name not in upstream.variables)
    record: dict[str, Any] = {
        "digest": upstream.digest,
        "variables": variables,
        "sensitive": sorted(upstream.sensitive),
        "secretVariables": secret,
        "upstream": dict(upstream.variables),
    }
    if sources.error is not None:
        record["error"] = sources.error
    return record


def needs_record(layer: Mapping[str, Any], upstream: Upstream | None) -> bool:
    return bool((layer.get("spec") or {}).get("varsFrom")) or upstream is not None
