"""What a run is given: its inputs record in the datastore (`PUT …/runs/{run}/inputs`, admin-only write, read by
that run's runner only), written by the controllers before they create the run (docs/architecture.md §9,
§5.11; issue 24, design item 6).

The runner reads no Secret and no ConfigMap: the controllers resolve `spec.varsFrom` (they already read Secrets)
and hand the values over here, with the upstream outputs of `spec.dependsOn`. The record:

- `digest`: the upstream inputs digest the run was created with (its `burrito-py.io/inputs-digest`), or null;
- `variables`: the varsFrom values in order, then the upstream outputs (a later source wins; `spec.vars`, which
  the runner reads from the layer, loses to all of them);
- `sensitive`: the variables from upstream outputs marked sensitive; `secretVariables`: the sorted names of the
  variables whose value came from a Secret (the runner masks both in its log; P3's plan views mask them);
- `upstream`: the upstream outputs alone, so the record can be resolved again with fresh varsFrom values;
- `error` (only when varsFrom could not be satisfied): why, naming kind, namespace, name and key, never a value.
  A run that needs its variables fails with it, as it did when the runner read the Secret itself; the run
  controller resolves the varsFrom again before a retry of such a run (`refresh_failed_inputs`), so a Secret
  created meanwhile is found.

The pure half (`resolve_sources`, `build_record`) is in inputs_record.py; this module reads the API and writes the
datastore.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from burrito_py.api.patterns import object_name_problem
from burrito_py.controllers.layer.inputs_record import (
    Read,
    Sources,
    Upstream,
    build_record,
    needs_record,
    resolve_sources,
)
from burrito_py.kube.client import KubeError, path

if TYPE_CHECKING:
    from burrito_py.controllers.context import Context

log = logging.getLogger(__name__)


async def read_sources(ctx: Context, layer: Mapping[str, Any]) -> Sources:
    """Read the layer's varsFrom objects (in its namespace) and resolve them. A 5xx or an unreachable API
    raises KubeError (decide again later); a missing object is for `optional` to judge; any other refusal, and a
    name that is not an object name (a path would lead to another namespace), is the record's error."""
    namespace = layer["metadata"]["namespace"]
    vars_from = list((layer.get("spec") or {}).get("varsFrom") or ())
    objects: list[Read] = []
    for entry in vars_from:
        kind = str(entry.get("kind") or "")
        plural = "secrets" if kind == "Secret" else "configmaps"
        problem = object_name_problem(entry.get("name"))
        if problem is not None:  # never read: a path in the name would reach another namespace's object
            objects.append(f"name {problem}")
            continue
        try:
            objects.append(await ctx.kube.get(path("v1", plural, namespace, str(entry.get("name") or ""))))
        except KubeError as exc:
            if exc.status is None or exc.status >= 500:
                raise
            # The API's message says why (the name is no object name, the controllers may not read it); no value.
            why = f" ({exc.message[:200]})" if exc.message else ""
            objects.append(f"cannot read {kind} {namespace}/{entry.get('name')}: {exc.status} {exc.reason}{why}")
    return resolve_sources(vars_from, namespace, objects)


async def store_record(ctx: Context, layer: Mapping[str, Any], run: str, record: Mapping[str, Any]) -> str | None:
    """PUT the record under the run; None when stored, else why not (names only)."""
    from burrito_py.datastore.client import DatastoreError

    if ctx.datastore is None:
        return None
    namespace, name = layer["metadata"]["namespace"], layer["metadata"]["name"]
    try:
        await asyncio.to_thread(ctx.datastore.put_inputs, namespace, name, run,
                                json.dumps(record, sort_keys=True).encode())
    except DatastoreError as exc:
        log.warning("layer %s/%s: cannot store the inputs of run %s: %s", namespace, name, run, exc)
        return f"the inputs of run {run} could not be stored in the datastore: {exc}"
    return None


async def put_run_inputs(ctx: Context, layer: Mapping[str, Any], run: str, upstream: Upstream | None) -> str | None:
    """Resolve the layer's varsFrom and store the run's record with `upstream` (None: it consumes none). Nothing
    is stored for a layer without either."""
    if not needs_record(layer, upstream):
        return None
    sources = await read_sources(ctx, layer)
    return await store_record(ctx, layer, run, build_record(sources, upstream or Upstream()))


async def refresh_failed_inputs(ctx: Context, layer: Mapping[str, Any], run: str) -> None:
    """Before a retry: a record whose varsFrom could not be satisfied is resolved again (its upstream part is
    kept), so a Secret created since is found, as when the runner read it at each attempt."""
    from burrito_py.datastore.client import DatastoreError

    if ctx.datastore is None or not (layer.get("spec") or {}).get("varsFrom"):
        return
    namespace, name = layer["metadata"]["namespace"], layer["metadata"]["name"]
    try:
        raw = await asyncio.to_thread(ctx.datastore.get_inputs, namespace, name, run)
        record = json.loads(raw)
    except (DatastoreError, ValueError):
        return  # none (an older run) or unreadable: the attempt says so itself
    if not isinstance(record, dict) or not record.get("error"):
        return
    upstream = Upstream(record.get("digest"), dict(record.get("upstream") or {}),
                        tuple(str(n) for n in record.get("sensitive") or ()))
    await store_record(ctx, layer, run, build_record(await read_sources(ctx, layer), upstream))
