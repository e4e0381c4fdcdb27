"""Acquire and release the per-layer Lease (docs/architecture.md §7): the lock that keeps one Terraform per state."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.controllers.run.lease_decisions import (
    LeaseVerdict,
    lease_name,
    lease_verdict,
    lock_key,
    other_runs_pods,
)
from burrito_py.kube.client import Kube, KubeError, path
from burrito_py.timeutil import utcnow

LEASES = "leases"
COORDINATION = "coordination.k8s.io/v1"

# Looks a run up: (exists, state). The inventory answers first; the API settles doubts.
HolderLookup = Callable[[str, str], Awaitable[tuple[bool, str | None]]]


def _micro_now() -> str:
    return utcnow().strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def layer_lease_name(layer: Mapping[str, Any], run: Mapping[str, Any] | None = None) -> str:
    """The Lease guarding the layer's state; a pull request's plan-only run takes one of its own (per pull request
    and layer): it never takes the state lock (§11.3), so it never blocks, nor waits for, the branch's runs. A pull
    request's apply (apply before merge) takes the layer's."""
    spec = layer.get("spec") or {}
    repo = spec.get("repository") or {}
    namespace = layer["metadata"]["namespace"]
    key = lock_key(repo.get("namespace") or namespace, repo.get("name", ""), spec.get("path", ""), spec.get("lockKey"))
    run_spec = (run or {}).get("spec") or {}
    pull_request = run_spec.get("pullRequest")
    # A pull request's apply before merge writes the layer's state: it takes the layer's own Lease.
    if pull_request and run_spec.get("action") != "apply":
        key = "\x00".join((key, "pull-request", pull_request))
    return lease_name(key)


def _lease_body(name: str, namespace: str, run: Mapping[str, Any], resource_version: str | None) -> dict[str, Any]:
    meta = run["metadata"]
    body: dict[str, Any] = {
        "apiVersion": COORDINATION,
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {ann.LABEL_LAYER: ann.layer_label((run.get("spec") or {}).get("layer", {}).get("name", ""))},
            "ownerReferences": [
                {"apiVersion": run.get("apiVersion"), "kind": "TerraformRun", "name": meta["name"], "uid": meta["uid"]}
            ],
        },
        "spec": {"holderIdentity": meta["name"], "acquireTime": _micro_now(), "renewTime": _micro_now()},
    }
    if resource_version:
        body["metadata"]["resourceVersion"] = resource_version
    return body


async def acquire(kube: Kube, layer: Mapping[str, Any], run: Mapping[str, Any], holder_of: HolderLookup,
                  pods: Iterable[Mapping[str, Any]] = ()) -> str | None:
    """Take the layer's lease for `run`. Returns None when acquired, else what it waits for. `pods`: the runner
    pods the controllers know of (the inventory's)."""
    namespace = layer["metadata"]["namespace"]
    name = layer_lease_name(layer, run)
    run_name = run["metadata"]["name"]
    others = other_runs_pods(pods, namespace, name, ann.layer_label(layer["metadata"]["name"]),
                             str(run["metadata"].get("uid")))
    for _ in range(3):  # lose a race → look again
        lease = await kube.get(path(COORDINATION, LEASES, namespace, name))
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity") or ""
        exists, state = (False, None) if not holder or holder == run_name else await holder_of(namespace, holder)
        verdict = lease_verdict(lease, run_name, state, exists, others)
        try:
            if verdict is LeaseVerdict.HELD:
                return None
            if verdict is LeaseVerdict.WAIT:
                return f"waiting for run {holder} to release the layer's lease"
            if verdict is LeaseVerdict.WAIT_FOR_POD:
                return (f"waiting for runner pod {', '.join(others)} to stop: its run no longer holds the layer's "
                        "lease (deleted or ended), but the pod may still run Terraform on the layer's state")
            if verdict is LeaseVerdict.CREATE:
                await kube.create(path(COORDINATION, LEASES, namespace), _lease_body(name, namespace, run, None))
                return None
            assert lease is not None
            rv = lease["metadata"].get("resourceVersion")
            await kube.replace(path(COORDINATION, LEASES, namespace, name), _lease_body(name, namespace, run, rv))
            return None
        except KubeError as exc:
            if exc.status not in (409,):
                raise
    return "waiting for the layer's lease: another run took it each time it was looked at"


async def release(kube: Kube, layer: Mapping[str, Any], run: Mapping[str, Any]) -> None:
    """Delete the lease if `run` still holds it (precondition on resourceVersion)."""
    namespace = layer["metadata"]["namespace"]
    run_name = run["metadata"]["name"]
    lease_path = path(COORDINATION, LEASES, namespace, layer_lease_name(layer, run))
    lease = await kube.get(lease_path)
    if lease is None or (lease.get("spec") or {}).get("holderIdentity") != run_name:
        return
    try:
        await kube.delete(lease_path, resource_version=lease["metadata"].get("resourceVersion"))
    except KubeError as exc:
        if exc.status != 409:  # taken over meanwhile: not ours to delete any more
            raise
