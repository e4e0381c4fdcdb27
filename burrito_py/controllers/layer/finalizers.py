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
    finalizer someone added meanwhile makes it fail with 409. The layer is then read again and the write made
    on its list (ours alone added or removed, as decided), a few times; only then is the decision made again
    (a wake), which would tell a release a second time.
    """
    path = crd_path("terraformlayers", layer["metadata"]["namespace"], layer["metadata"]["name"])
    current: Body | None = layer
    for _ in range(3):
        if current is None:
            return None  # gone meanwhile
        meta = current["metadata"]
        if present and meta.get("deletionTimestamp") and current is not layer:
            break  # deleted meanwhile: no finalizer may be added to it; decided again
        finalizers = [f for f in meta.get("finalizers") or () if f != DESTROY_FINALIZER]
        if present:
            finalizers.append(DESTROY_FINALIZER)
        patch = {"metadata": {"finalizers": finalizers or None, "resourceVersion": meta.get("resourceVersion")}}
        try:
            updated = await ctx.kube.merge_patch(path, patch)
        except KubeError as exc:
            if exc.status == 404:
                return None
            if exc.status != 409:
                raise
            current = await ctx.kube.get(path)
            continue
        if updated["metadata"].get("deletionTimestamp") and not updated["metadata"].get("finalizers"):
            ctx.inventory.layers.forget(updated)
            return None
        ctx.inventory.layers.observe(updated)
        return updated
    ctx.wake_layer(key_of(layer), 1.0)  # still changing under us, or deleted meanwhile: decided again
    return None
