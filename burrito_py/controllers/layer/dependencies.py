"""Layer dependencies: the index upstream → dependents, the upstream outputs the controllers hold, and the
snapshot the pure decision (dependency_decisions.py) reads; docs/architecture.md §5.11.

The index is kept by the layer store itself (inventory.LayerStore: every observed layer re-indexes its
`spec.dependsOn`), so it is never out of step with the inventory: an upstream's change wakes its dependents at
once (operator.py), and a deleted dependent leaves the index with its layer, so it can never hold an upstream's
destroy.

Upstream outputs are read from the datastore once per upstream apply (`apply-run`) and kept in memory: a
dependent's evaluation costs no request while its upstreams' applies are unchanged. Values stay here and in
the datastore record handed to the runner (`upstream_inputs`, then run_inputs.py); status holds only a salted
digest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from burrito_py.api import annotations as ann
from burrito_py.api.dependencies import layer_dependencies, terragrunt_problems
from burrito_py.controllers.layer.dependency_decisions import (
    CONDITION,
    FAILED,
    DependencySnapshot,
    DependencyVerdict,
    UpstreamView,
)
from burrito_py.controllers.layer.inputs_record import Upstream
from burrito_py.controllers.layer.outputs_cache import HeldOutputs, read_outputs
from burrito_py.kube.inventory import Body, Key, key_of

if TYPE_CHECKING:
    from burrito_py.controllers.context import Context

log = logging.getLogger(__name__)
RETRY_SECONDS = 15.0
MOVED_ON = "an upstream applied again while the run was being created"


def dependency_facts(layer: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """What a dependent's decision reads of its upstream (upstream_view)."""
    if layer is None:
        return ()
    status = layer.get("status") or {}
    return (layer["metadata"].get("deletionTimestamp"), status.get("state"), status.get("appliedRevision"),
            _condition_reason(status, CONDITION), (layer["metadata"].get("annotations") or {}).get(ann.APPLY_RUN))


def wake_related(ctx: Context, key: Key, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None,
                 upstreams: tuple[Key, ...]) -> None:
    """Event-driven dependencies (the layer store's on_change): when what dependents read of `key` changed,
    wake them now; when a layer goes or names other upstreams, wake its upstreams (a destroy may wait for it)."""
    if dependency_facts(before) != dependency_facts(after):
        for dependent in ctx.inventory.layers.dependents_of(key):
            ctx.wake_layer(dependent)
    now = ctx.inventory.layers.upstreams_of(key)
    if after is None or now != upstreams:
        for upstream in {*upstreams, *now}:
            ctx.wake_layer(upstream)
    if after is None:
        ctx.outputs.forget(key)


def _condition_reason(status: Mapping[str, Any], type_: str) -> str | None:
    return next((c.get("reason") for c in status.get("conditions") or () if c.get("type") == type_), None)


def _source(layer: Mapping[str, Any]) -> tuple[str, str, str]:
    spec = layer.get("spec") or {}
    ref = spec.get("repository") or {}
    return (ref.get("namespace") or layer["metadata"]["namespace"], ref.get("name", ""), spec.get("branch", ""))


def upstream_view(upstream: Mapping[str, Any], dependent: Mapping[str, Any], outputs: HeldOutputs | None,
                  outputs_problem: str | None = None) -> UpstreamView:
    status = upstream.get("status") or {}
    return UpstreamView(
        key=key_of(upstream),
        deleting=bool(upstream["metadata"].get("deletionTimestamp")),
        state=status.get("state"),
        applied_revision=status.get("appliedRevision"),
        same_source=_source(upstream) == _source(dependent),
        upstream_failed=_condition_reason(status, CONDITION) == FAILED,
        apply_run=(upstream["metadata"].get("annotations") or {}).get(ann.APPLY_RUN) or None,
        outputs=outputs.fingerprints if outputs is not None else None,
        outputs_problem=outputs_problem,
    )


async def held_outputs(ctx: Context, upstream: Mapping[str, Any]) -> tuple[HeldOutputs | None, str | None]:
    """The outputs of the upstream's last apply: from memory, else read once from the datastore; with why they
    cannot be read now (the dependent shows it, and is woken to try again). (None, None): it has none (never
    applied)."""
    key = key_of(upstream)
    apply_run = (upstream["metadata"].get("annotations") or {}).get(ann.APPLY_RUN)
    if not apply_run or "/" not in apply_run or ctx.datastore is None:
        return None, None
    held = ctx.outputs.get(key, apply_run)
    if held is not None:
        return held, None
    from burrito_py.datastore.client import DatastoreError

    run, _, attempt = apply_run.rpartition("/")
    try:
        raw = await asyncio.to_thread(ctx.datastore.get_outputs, key[0], key[1], run, int(attempt))
    except (DatastoreError, ValueError) as exc:
        log.warning("layer %s/%s: cannot read the outputs of apply %s: %s", *key, apply_run, exc)
        return None, f"cannot read them from the datastore: {exc}"
    held = read_outputs(raw, apply_run)
    if held is None:
        log.warning("layer %s/%s: the outputs of apply %s are unreadable", *key, apply_run)
        return None, f"the datastore's copy of apply {apply_run}'s outputs is not `output -json` of outputs"
    ctx.outputs.put(key, held)
    return held, None


async def dependency_snapshot(ctx: Context, layer: Mapping[str, Any]) -> DependencySnapshot | None:
    """What the decision needs of the layer's upstreams (None: it has none). Reads outputs only for the
    upstreams whose outputs it consumes, and only once per upstream apply."""
    key = key_of(layer)
    deps = layer_dependencies(layer, key[0])
    problems = terragrunt_problems(layer["metadata"].get("annotations"))
    if not deps and not problems:
        return None
    upstreams: dict[Key, UpstreamView] = {}
    missing_outputs = False
    allowed = ctx.settings.allow_cross_namespace_dependencies
    for dep in deps:
        body = ctx.inventory.layers.get(dep.upstream)
        if body is None or (dep.upstream[0] != key[0] and not allowed):
            continue  # a refused namespace's outputs are not even read
        outputs, problem = await held_outputs(ctx, body) if dep.reads_outputs else (None, None)
        missing_outputs = missing_outputs or (dep.reads_outputs and outputs is None and _applied(body))
        upstreams[dep.upstream] = upstream_view(body, layer, outputs, problem)
    if missing_outputs:
        ctx.wake_layer(key, RETRY_SECONDS)
    annotations = layer["metadata"].get("annotations") or {}
    return DependencySnapshot(
        dependent=key,
        branch_commit=annotations.get(ann.BRANCH_COMMIT),
        dependencies=deps,
        upstreams=upstreams,
        cycle=ctx.inventory.layers.cycle_through(key),
        cross_namespace_allowed=allowed,
        salt=str(layer["metadata"].get("uid") or ""),
        problems=problems,
    )


def _applied(upstream: Mapping[str, Any]) -> bool:
    return bool((upstream["metadata"].get("annotations") or {}).get(ann.APPLY_RUN))


def inputs_record(verdict: DependencyVerdict, outputs: Mapping[Key, HeldOutputs]) -> Body:
    """What the runner of a plan gets: the variables, which of them are sensitive (masked in its log), and the
    digest it was decided with."""
    variables: dict[str, Any] = {}
    sensitive: list[str] = []
    for variable, upstream, output in verdict.inputs:
        held = outputs[upstream]
        variables[variable] = held.values[output]
        if output in held.sensitive:
            sensitive.append(variable)
    return {"digest": verdict.inputs_digest, "variables": variables, "sensitive": sorted(sensitive)}


async def upstream_inputs(ctx: Context, verdict: DependencyVerdict) -> Upstream | str | None:
    """The upstream outputs a run being created consumes, for its inputs record (run_inputs.py): None when it
    consumes none; `MOVED_ON` when an upstream applied again meanwhile (decide again at once)."""
    if not verdict.inputs:
        # Nothing to hand over (Terragrunt reads its dependencies' outputs itself, triggerAlways reads none): the
        # record still carries the digest the run is stamped with, which the runner checks.
        return Upstream(verdict.inputs_digest) if verdict.inputs_digest else None
    outputs: dict[Key, HeldOutputs] = {}
    for upstream, apply_run in verdict.consumed:
        body = ctx.inventory.layers.get(upstream)
        held = (await held_outputs(ctx, body))[0] if body is not None else None
        if held is None or held.apply_run != apply_run:
            return MOVED_ON
        outputs[upstream] = held
    record = inputs_record(verdict, outputs)
    return Upstream(record["digest"], record["variables"], tuple(record["sensitive"]))
