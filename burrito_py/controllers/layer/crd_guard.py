"""Deleting a CustomResourceDefinition is never a destroy request.

When a CRD is deleted, Kubernetes deletes every instance of its kind, and garbage collection deletes what
those instances own. `helm uninstall` deleting the CRDs therefore deleted every layer, and a controller that
destroys on deletion destroyed real infrastructure (tofu-controller #1209). A layer being deleted is not
destroyed when the deletion comes from a CRD:

- the TerraformLayer CRD itself is terminating, or
- the CRD of the kind that owns the layer (an AGL kind, or anyone's) is terminating, is no longer served,
  or was created after the layer (it was deleted, and the AGL made it again), or
- the layer carries `api.burrito-py.io/skip-destroy` (set by this guard while it waits for a live run, so a
  CRD made again meanwhile cannot turn the destroy back on; a person may set it too).

Cost: `CrdWatch` holds every CRD's few facts from one watch, so evaluating a deleting layer makes no request.
What the watch says "terminating" is trusted (a CRD never stops terminating). Everything else is checked
with fresh reads (`look_fresh`) just before a destroy run would be created, since a layer's deletion event
may reach us before its CRD's: that is one or two GETs per destroy step, never per reconcile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.kube.client import Kube
from burrito_py.timeutil import parse_time

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
LAYER_CRD = f"terraformlayers.{ann.GROUP}"
GroupKind = tuple[str, str]


@dataclass(frozen=True, slots=True)
class CrdView:
    """The facts about a CRD the guard needs."""

    name: str
    uid: str
    group: str
    kind: str
    terminating: bool
    created: str  # metadata.creationTimestamp


def crd_view(body: Mapping[str, Any]) -> CrdView:
    meta, spec = body["metadata"], body.get("spec") or {}
    return CrdView(
        name=str(meta["name"]),
        uid=str(meta.get("uid") or ""),
        group=str(spec.get("group") or ""),
        kind=str((spec.get("names") or {}).get("kind") or ""),
        terminating=bool(meta.get("deletionTimestamp")),
        created=str(meta.get("creationTimestamp") or ""),
    )


class CrdWatch:
    """Every CRD's view, by name and by (group, kind), fed by the CRD watch and by fresh reads."""

    def __init__(self) -> None:
        self._by_name: dict[str, CrdView] = {}
        self._by_kind: dict[GroupKind, CrdView] = {}

    def observe(self, body: Mapping[str, Any]) -> bool:
        """Take in a CRD; True when this makes it terminating (it was not known to be)."""
        view = crd_view(body)
        held = self._by_name.get(view.name)
        if held is not None and held.uid == view.uid and held.terminating and not view.terminating:
            return False  # a late event from before the deletion: terminating is for good
        if held is not None and (held.group, held.kind) != (view.group, view.kind):
            self._by_kind.pop((held.group, held.kind), None)
        self._by_name[view.name] = view
        self._by_kind[(view.group, view.kind)] = view
        return view.terminating and (held is None or not held.terminating or held.uid != view.uid)

    def forget(self, body: Mapping[str, Any]) -> None:
        view = crd_view(body)
        held = self._by_name.get(view.name)
        if held is not None and held.uid == view.uid:
            del self._by_name[view.name]
            if self._by_kind.get((held.group, held.kind)) == held:
                del self._by_kind[(held.group, held.kind)]

    def named(self, name: str) -> CrdView | None:
        return self._by_name.get(name)

    def of_kind(self, group: str, kind: str) -> CrdView | None:
        return self._by_kind.get((group, kind))

    def __len__(self) -> int:
        return len(self._by_name)


@dataclass(frozen=True, slots=True)
class OwnerKind:
    """The kind of one of the layer's owners, and what is known of its CRD."""

    group: str
    version: str
    kind: str
    crd: CrdView | None  # None: no CRD known (a built-in kind, or not known yet)
    served: bool = True  # False only from a fresh look at discovery: the kind is gone


def owner_kinds(layer: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(group, version, kind) of each owner of the layer from an API group (built-in core kinds have no CRD)."""
    found = []
    for ref in layer["metadata"].get("ownerReferences") or ():
        group, _, version = str(ref.get("apiVersion") or "").rpartition("/")
        if group and ref.get("kind"):
            found.append((group, version, str(ref["kind"])))
    return found


def cached_owners(layer: Mapping[str, Any], crds: CrdWatch) -> list[OwnerKind]:
    return [OwnerKind(g, v, k, crds.of_kind(g, k)) for g, v, k in owner_kinds(layer)]


def crd_deletion(layer: Mapping[str, Any], layer_crd: CrdView | None, owners: Sequence[OwnerKind]) -> str | None:
    """Why this layer's deletion comes from a CRD's deletion (pure); None when nothing says so."""
    meta = layer["metadata"]
    marked = (meta.get("annotations") or {}).get(ann.SKIP_DESTROY)
    if marked is not None:
        return marked or f"the layer is annotated {ann.SKIP_DESTROY}"
    if layer_crd is not None and layer_crd.terminating:
        return f"CustomResourceDefinition {layer_crd.name} is being deleted"
    layer_created = parse_time(meta.get("creationTimestamp"))
    for owner in owners:
        what = f"{owner.kind}.{owner.group}"
        if not owner.served:
            return f"the layer's owner kind {what} is no longer served: its CustomResourceDefinition was deleted"
        if owner.crd is None:
            continue
        if owner.crd.terminating:
            return f"CustomResourceDefinition {owner.crd.name} of the layer's owner kind {what} is being deleted"
        crd_created = parse_time(owner.crd.created)
        if layer_created is not None and crd_created is not None and crd_created > layer_created:
            # The layer's owner existed before the layer, and its kind's CRD before the owner.
            return (f"CustomResourceDefinition {owner.crd.name} of the layer's owner kind {what} was deleted "
                    "(it has been created again since the layer was made)")
    return None


async def look_fresh(kube: Kube, layer: Mapping[str, Any], crds: CrdWatch) -> str | None:
    """`crd_deletion` from fresh reads of the layer's CRD and its owners' kinds (discovery, then CRD)."""
    layer_crd_body = await kube.get(f"{CRDS}/{LAYER_CRD}")
    if layer_crd_body is not None:
        crds.observe(layer_crd_body)
    owners = []
    for group, version, kind in owner_kinds(layer):
        resources = await kube.get(f"/apis/{group}/{version}")
        plural = next((str(r["name"]) for r in (resources or {}).get("resources") or ()
                       if r.get("kind") == kind and "/" not in str(r.get("name"))), None)
        if plural is None:
            owners.append(OwnerKind(group, version, kind, None, served=False))
            continue
        body = await kube.get(f"{CRDS}/{plural}.{group}")
        if body is not None:
            crds.observe(body)
        owners.append(OwnerKind(group, version, kind, crd_view(body) if body is not None else None))
    fresh_layer_crd = crd_view(layer_crd_body) if layer_crd_body is not None else None
    return crd_deletion(layer, fresh_layer_crd, owners)
