"""Managed state's lock, bound to runs (docs/architecture.md §10.6): a lock whose runner pod is gone is released.

Terraform releases its lock when it exits; a runner pod killed under it (SIGKILL at the grace deadline, a lost
node) leaves it held, and the next attempt's terraform would wait on it for ever. The datastore records with each
lock the run, attempt, pod and pod uid of the token that took it (never what the runner says), so when an attempt
of a managed-state layer ends the run controller looks at the layer's lock: held by a pod that no longer exists,
or exists under another uid, or has ended, it is released (an admin's UNLOCK naming its ID, so a lock taken since
stays) and a Warning `StateLockReleased` on the layer says so. A pod that may still run terraform (Pending,
Running, or any phase not ended, terminating or not, or stopped at its deadline while its container still runs) keeps
its lock; so does a lock no runner pod took (an admin's)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import anyio

from burrito_py.api.annotations import STATE_LOCATION
from burrito_py.api.effective import state_location
from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.validation import inherited
from burrito_py.controllers.run.decide import DEADLINE_EXCEEDED
from burrito_py.datastore.client import DatastoreError
from burrito_py.kube.client import KubeError, path
from burrito_py.kube.events import post_event

log = logging.getLogger(__name__)

ENDED = ("Succeeded", "Failed")


def orphaned(lock: Mapping[str, Any] | None, pod: Mapping[str, Any] | None) -> str | None:
    """Why `lock` may be released (its pod is gone or ended), else None. `pod` is the pod of the lock's name as the
    API holds it now (None: there is none). Pure."""
    if lock is None:
        return None
    name, uid = str(lock.get("pod") or ""), str(lock.get("podUid") or "")
    if not name or not uid:
        return None  # not a runner pod's lock: only an admin releases it
    if pod is None:
        return f"its runner pod {name} is gone"
    if (pod.get("metadata") or {}).get("uid") != uid:
        return f"its runner pod {name} (uid {uid}) is gone (a pod of that name now has another uid)"
    status = pod.get("status") or {}
    phase = status.get("phase")
    # A pod its kubelet stopped at its deadline may be Failed while its container still stops Terraform (a kubelet
    # that writes the phase first; Kubernetes' own waits for the container, §6.1).
    stopping = status.get("reason") == DEADLINE_EXCEEDED and any(
        (c.get("state") or {}).get("running") for c in status.get("containerStatuses") or ())
    if phase in ENDED and not stopping:
        return f"its runner pod {name} has ended ({phase})"
    return None


def managed(layer: Mapping[str, Any], repository: Mapping[str, Any] | None) -> bool:
    """Whether the layer's state lives in the datastore: where its last migration put it, else its spec."""
    recorded = ((layer.get("metadata") or {}).get("annotations") or {}).get(STATE_LOCATION)
    return state_location(recorded, bool(inherited(layer, repository, "state", "managed"))) == "managed"


async def release_orphaned_lock(ctx: Context, layer: Mapping[str, Any], repository: Mapping[str, Any] | None,
                                migration: bool = False) -> None:
    """Best effort (a failure is logged; the next ended attempt looks again): release the layer's state lock when
    its pod is gone or ended. `migration`: the attempt was a migrate-state run's, which locks the datastore's state
    whichever way it moves it."""
    store = ctx.datastore
    if store is None or not (migration or managed(layer, repository)):
        return
    meta = layer["metadata"]
    namespace, name = str(meta["namespace"]), str(meta["name"])
    try:
        lock = await anyio.to_thread.run_sync(store.get_state_lock, namespace, name)
        if lock is None or not lock.get("pod"):
            return
        # Read from the API, not the watch-fed inventory: a pod the watch has not shown yet must not lose its lock.
        pod = await ctx.kube.get(path("v1", "pods", namespace, str(lock["pod"])))
        reason = orphaned(lock, pod)
        if reason is None:
            return
        await anyio.to_thread.run_sync(store.unlock_state, namespace, name, str(lock.get("id") or ""))
    except (KubeError, DatastoreError, ValueError) as exc:  # report, and look again at the next ended attempt
        message = (f"cannot check or release its state lock after an attempt ended: {exc}; looked at again when the "
                   "next attempt ends")
        log.warning("layer %s/%s: %s", namespace, name, message)
        # On the layer, where the next attempt's "Error acquiring the state lock" would otherwise be all one sees.
        await post_event(ctx.kube, layer, "Warning", "StateLockUnchecked", message[:1000])
        return
    message = (f"state lock {lock.get('id')} of run {lock.get('run')} attempt {lock.get('attempt')} released: "
               f"{reason}")
    log.info("layer %s/%s: %s", namespace, name, message)
    await post_event(ctx.kube, layer, "Warning", "StateLockReleased", message)
