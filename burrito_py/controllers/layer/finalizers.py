"""The layer's destroy finalizer, added and removed without ever dropping another controller's."""

from __future__ import annotations

from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.destroy import DESTROY_FINALIZER
from burrito_py.kube.client import KubeError, crd_path
from burrito_py.kube.inventory import Body, key_of


async def set_destroy_finalizer(ctx: Context, layer: Body, present: bool) -> Body | None:
    """Add or remove `DESTROY_FINALIZER`; the layer as stored, or None when it is gone (removing the last
    finalizer of a layer being deleted deletes it) or changed under us.

    The list is replaced whole, so the write carries the layer's resourceVersion as a precondition: a
    finalizer someone added meanwhile makes it fail with 409, and the watch event of that change brings
    us back with the new list.
    """
    meta = layer["metadata"]
    finalizers = [f for f in meta.get("finalizers") or () if f != DESTROY_FINALIZER]
    if present:
        finalizers.append(DESTROY_FINALIZER)
    patch = {"metadata": {"finalizers": finalizers or None, "resourceVersion": meta.get("resourceVersion")}}
    try:
        updated = await ctx.kube.merge_patch(crd_path("terraformlayers", meta["namespace"], meta["name"]), patch)
    except KubeError as exc:
        if exc.status not in (404, 409):
            raise
        ctx.wake_layer(key_of(layer), 1.0)  # 409: the event may already be behind us
        return None
    if updated["metadata"].get("deletionTimestamp") and not updated["metadata"].get("finalizers"):
        ctx.inventory.layers.forget(updated)
        return None
    ctx.inventory.layers.observe(updated)
    return updated
