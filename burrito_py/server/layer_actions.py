"""What the REST API and the UI both do to a layer: annotate it for the controllers (sync-now, approve-plan).

The server writes with its own rights; who may ask is decided by the caller (the REST API: anyone but a runner;
the UI: a SubjectAccessReview of the user)."""

from __future__ import annotations

from burrito_py.api import annotations as ann
from burrito_py.kube.client import Kube, KubeError, crd_path
from burrito_py.timeutil import format_time, utcnow


class LayerNotFound(Exception):
    pass


class NotPendingPlan(Exception):
    """The sum asked for is not the layer's pending plan (a newer plan came, or it was applied)."""


async def annotate(kube: Kube, namespace: str, name: str, annotations: dict[str, str]) -> None:
    try:
        await kube.merge_patch(crd_path("terraformlayers", namespace, name),
                               {"metadata": {"annotations": annotations}})
    except KubeError as exc:
        if exc.status == 404:
            raise LayerNotFound(f"TerraformLayer {namespace}/{name} not found") from None
        raise


async def request_sync(kube: Kube, namespace: str, name: str) -> str:
    """Set sync-now (the layer controller plans and removes it); returns the time written."""
    now = format_time(utcnow())
    await annotate(kube, namespace, name, {ann.SYNC_NOW: now})
    return now


async def approve_pending_plan(kube: Kube, namespace: str, name: str, plan_sum: str) -> None:
    """Approve `plan_sum` only while it is the layer's pending plan: an approval is for the plan its author read.
    (The controllers apply only an approval naming the current plan's sum anyway; this answers the user at once.)"""
    layer = await kube.get(crd_path("terraformlayers", namespace, name))
    if layer is None:
        raise LayerNotFound(f"TerraformLayer {namespace}/{name} not found")
    pending = ((layer.get("status") or {}).get("pendingPlan") or {}).get("sum")
    if pending != plan_sum:
        raise NotPendingPlan(f"plan {plan_sum} is not the pending plan of {namespace}/{name} (pending: "
                             f"{pending or 'none'})")
    await annotate(kube, namespace, name, {ann.APPROVE_PLAN: plan_sum})
