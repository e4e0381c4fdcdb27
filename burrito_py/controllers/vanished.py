"""Runs and runner pods deleted while a watch was down: found at each resync (docs/architecture.md §6.1).

A watch that ends with `410 Gone` (its resourceVersion compacted away, as after an API server restart) is started
again by listing; the listing shows what exists, and nothing says what was deleted meanwhile, so the inventory kept
such objects for good: a runner pod deleted then stayed "Running" (its run waited forever, its Lease held), a run
deleted then stayed the layer's active run (the layer stayed Running). At each resync the controllers ask the API
for what still matters of them, the unfinished runs and the active runner pods (bounded by the work in flight,
never every object), and forget what the API no longer has, as the watch would have; an object found is taken as
the API has it now.

Layers too, where a missed deletion holds work for good: a layer being deleted, and each layer that depends on it
(its destroy waits for them, `WaitingForDependents`; its dependents wait while it "is being deleted"). Bounded by
the deletions in flight, never every layer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.controllers.context import Context
from burrito_py.controllers.run.decide import ACTIVE_POD_PHASES, TERMINAL
from burrito_py.kube.client import crd_path, path
from burrito_py.kube.inventory import key_of

__all__ = ["forget_vanished"]

log = logging.getLogger(__name__)


def _layer_key(run: Mapping[str, Any]) -> tuple[str, str]:
    ref = (run.get("spec") or {}).get("layer") or {}
    return (run["metadata"]["namespace"], str(ref.get("name") or ""))


async def forget_vanished(ctx: Context) -> int:
    """Forget the unfinished runs, the active runner pods and the layers being deleted (with their dependents) the
    API no longer has, waking whom they concern (a pod's run fails its attempt: "disappeared"); how many were
    forgotten."""
    forgotten = 0
    for run in [r for r in ctx.inventory.runs if (r.get("status") or {}).get("state") not in TERMINAL]:
        found = await ctx.kube.get(crd_path("terraformruns", run["metadata"]["namespace"], run["metadata"]["name"]))
        if found is None:
            ctx.inventory.runs.forget(run)
            forgotten += 1
            log.info("run %s/%s was deleted while a watch was down: forgotten", *key_of(run))
            pull_request = (run.get("spec") or {}).get("pullRequest")
            if pull_request:
                ctx.wake_pull_request((run["metadata"]["namespace"], str(pull_request)))
            else:
                ctx.wake_layer(_layer_key(run))
        else:
            ctx.inventory.runs.observe(found)
    for pod in [p for p in ctx.inventory.pods if (p.get("status") or {}).get("phase") in (None, *ACTIVE_POD_PHASES)]:
        live = await ctx.kube.get(path("v1", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"]))
        if live is None:
            owner = (pod["metadata"].get("labels") or {}).get(ann.LABEL_RUN)
            ctx.inventory.forget_pod(pod)  # its run's attempt ends: "disappeared (deleted)"
            forgotten += 1
            log.info("runner pod %s/%s was deleted while a watch was down: forgotten", *key_of(pod))
            if owner:
                ctx.wake_run((pod["metadata"]["namespace"], str(owner)))
        else:
            ctx.inventory.pods.observe(live)
    for deleting in [layer for layer in ctx.inventory.layers if layer["metadata"].get("deletionTimestamp")]:
        upstream = key_of(deleting)
        for key in (upstream, *ctx.inventory.layers.dependents_of(upstream)):
            held = ctx.inventory.layers.get(key)
            if held is None:
                continue
            found = await ctx.kube.get(crd_path("terraformlayers", *key))
            if found is None:
                ctx.inventory.layers.forget(held)  # wakes its upstreams and dependents (dependencies.wake_related)
                forgotten += 1
                log.info("layer %s/%s was deleted while a watch was down: forgotten", *key)
            else:
                ctx.inventory.layers.observe(found)
        ctx.wake_layer(upstream)
    return forgotten
