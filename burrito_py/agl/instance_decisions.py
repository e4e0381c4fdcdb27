"""What to write for one instance (pure): its layer, and the status projected back from that layer.

Tenants only ever touch their instances: the instance's spec becomes the layer's, its approval
annotation is copied onto the layer, and the layer's progress comes back as the instance's status.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from burrito_py.agl.compile import CompiledInstance, instance_of_layer
from burrito_py.agl.errors import Invalid
from burrito_py.api import annotations as ann
from burrito_py.api.layer import LAYER_STATES, LayerState
from burrito_py.controllers.run.pod_creation import is_blocked_result
from burrito_py.kube.conditions import Cond, merge_conditions
from burrito_py.timeutil import format_time

__all__ = ["LayerWrite", "layer_write", "orphaned_layers", "project_status", "status_patch"]

NO_CHANGES = "No changes."


@dataclass(frozen=True, slots=True)
class LayerWrite:
    """At most one of: a layer to create, a full layer to replace (PUT), or why neither is possible."""

    create: dict[str, Any] | None = None
    replace: dict[str, Any] | None = None
    conflict: str | None = None


def _owned_by(layer: Mapping[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in (layer["metadata"].get("ownerReferences") or ()))


def layer_write(compiled: CompiledInstance, existing: Mapping[str, Any] | None, instance: Mapping[str, Any],
                now: datetime) -> LayerWrite:
    """Create or re-align the instance's layer. A spec change also asks for a plan now (`sync-now`), so the
    new variables are planned at once and the plan awaiting approval is replaced (its sum changes)."""
    approval = (instance["metadata"].get("annotations") or {}).get(ann.APPROVE_PLAN)
    if existing is None:
        body = copy.deepcopy(compiled.layer)
        if approval:
            body["metadata"]["annotations"] = {**body["metadata"].get("annotations", {}), ann.APPROVE_PLAN: approval}
        return LayerWrite(create=body)
    uid = str(instance["metadata"].get("uid") or "")
    if not _owned_by(existing, uid):
        kind = instance.get("kind", "instance")
        return LayerWrite(conflict=f"TerraformLayer {compiled.layer_name} already exists and does not belong to this "
                          f"{kind}; delete it or rename the {kind}")
    body = copy.deepcopy(dict(existing))
    meta = body["metadata"]
    desired_meta = compiled.layer["metadata"]
    meta["labels"] = {**(meta.get("labels") or {}), **desired_meta["labels"]}
    others = [ref for ref in meta.get("ownerReferences") or () if ref.get("uid") != uid]
    meta["ownerReferences"] = [*others, *desired_meta["ownerReferences"]]
    annotations = dict(meta.get("annotations") or {})
    if body.get("spec") != compiled.layer["spec"]:
        body["spec"] = copy.deepcopy(compiled.layer["spec"])
        annotations[ann.SYNC_NOW] = format_time(now)
    if approval and annotations.get(ann.APPROVE_PLAN) != approval:
        annotations[ann.APPROVE_PLAN] = approval
    # The definition's plan policies follow it (none left: the annotation goes).
    wanted_policies = (desired_meta.get("annotations") or {}).get(ann.LAYER_PLAN_POLICIES)
    if wanted_policies:
        annotations[ann.LAYER_PLAN_POLICIES] = wanted_policies
    else:
        annotations.pop(ann.LAYER_PLAN_POLICIES, None)
    if annotations or "annotations" in meta:
        meta["annotations"] = annotations
    if body == existing:
        return LayerWrite()
    body.pop("status", None)  # the main endpoint ignores it; leave no doubt about who writes it
    return LayerWrite(replace=body)


def _layer_conditions(layer: Mapping[str, Any], compiled: CompiledInstance, approval: str | None,
                      plural: str, name: str) -> tuple[Cond, Cond]:
    a = layer["metadata"].get("annotations") or {}
    status = layer.get("status") or {}
    # Typed by the one list of layer states (api/layer.py): a state it does not hold is a type error below.
    state: LayerState | None = status.get("state") if status.get("state") in LAYER_STATES else None
    result = str(status.get("lastResult") or "")
    plan_sum = a.get(ann.PLAN_SUM)
    applied = plan_sum is not None and (a.get(ann.APPLY_SUM) == plan_sum or a.get(ann.PLAN_SUMMARY) == NO_CHANGES)
    pending = status.get("pendingPlan") or {}
    pending_sum = pending.get("sum")
    spec_current = layer.get("spec") == compiled.layer["spec"] and ann.SYNC_NOW not in a
    invalid = next((c for c in status.get("conditions") or ()
                    if c.get("type") in ("Ready", "Valid") and c.get("status") == "False"), None)

    if pending_sum:
        if approval == pending_sum:
            pending_cond = Cond("PendingApproval", True, "Approved", f"plan {pending_sum} is approved; applying it")
        else:
            pending_cond = Cond("PendingApproval", True, "PlanAwaitsApproval",
                                f"approve plan {pending_sum} with: kubectl annotate {plural} {name} "
                                f"{ann.APPROVE_PLAN}={pending_sum} --overwrite")
    else:
        pending_cond = Cond("PendingApproval", False, "NoPendingPlan")

    ready: Cond
    if invalid is not None:
        ready = Cond("Ready", False, str(invalid.get("reason") or "LayerInvalid"), str(invalid.get("message") or ""))
    elif state == "Idle" and applied and spec_current:
        ready = Cond("Ready", True, "Applied", result)
    elif state == "MaxRetriesReached":
        ready = Cond("Ready", False, "Failed", result)
    elif pending_sum and state != "Running":
        ready = Cond("Ready", False, "WaitingForApproval", f"plan {pending_sum} waits for approval: {result}")
    elif state == "Running" and is_blocked_result(result):
        ready = Cond("Ready", False, "RunCannotStart", result)  # e.g. the runner ServiceAccount is missing
    elif state == "Running":
        ready = Cond("Ready", False, "Running", f"TerraformLayer {compiled.layer_name} is running Terraform")
    elif state == "ApplyNeeded":
        ready = Cond("Ready", False, "ApplyNeeded", result)
    else:
        ready = Cond("Ready", False, "Planning", f"TerraformLayer {compiled.layer_name} is waiting for a plan")
    return ready, pending_cond


def project_status(
    instance: Mapping[str, Any],
    outcome: CompiledInstance | Invalid,
    layer: Mapping[str, Any] | None,
    now: datetime,
    plural: str,
    conflict: str | None = None,
) -> dict[str, Any]:
    """The instance's whole status: conditions Ready and PendingApproval, the layer, the plan awaiting
    approval, the last applied revision and the output names."""
    meta = instance["metadata"]
    previous = (instance.get("status") or {}).get("conditions")
    approval = (meta.get("annotations") or {}).get(ann.APPROVE_PLAN)
    status: dict[str, Any] = {"observedGeneration": meta.get("generation")}
    conds: tuple[Cond, Cond]
    no_plan = Cond("PendingApproval", False, "NoPendingPlan")
    if isinstance(outcome, Invalid):
        conds = (Cond("Ready", False, "Invalid", str(outcome)), no_plan)
    elif conflict is not None:
        conds = (Cond("Ready", False, "LayerConflict", conflict), no_plan)
    elif layer is None:
        conds = (Cond("Ready", False, "Creating", f"creating TerraformLayer {outcome.layer_name}"), no_plan)
    else:
        conds = _layer_conditions(layer, outcome, approval, plural, str(meta["name"]))
    if isinstance(outcome, CompiledInstance):
        status["layer"] = outcome.layer_name
        status["outputsSecret"] = outcome.secret_name
    if layer is not None and not isinstance(outcome, Invalid) and conflict is None:
        layer_status = layer.get("status") or {}
        pending = layer_status.get("pendingPlan")
        if pending:
            status["pendingPlan"] = {k: v for k, v in pending.items() if k in ("sum", "run", "revision")}
        revision = (layer["metadata"].get("annotations") or {}).get(ann.APPLY_COMMIT)
        if revision:
            status["lastAppliedRevision"] = revision
        status["outputs"] = list(layer_status.get("outputs") or ())
    status["conditions"] = merge_conditions(previous, conds, now)
    return status


def _merge_diff(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    patch: dict[str, Any] = {key: None for key in current if key not in desired}
    for key, value in desired.items():
        old = current.get(key)
        if old == value:
            continue
        both_maps = isinstance(old, Mapping) and isinstance(value, Mapping)
        patch[key] = _merge_diff(old, value) if both_maps else value  # type: ignore[arg-type]
    return patch


def status_patch(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> dict[str, Any] | None:
    """A merge patch (RFC 7386) turning `current` into `desired`, null for what goes away; None when equal."""
    patch = _merge_diff(current or {}, desired)
    return patch or None


def owned_by_kind(layer: Mapping[str, Any], group: str, kind: str) -> bool:
    """Whether the layer is labelled as `group`/`kind`'s and an instance of that kind owns it. The labels alone are
    anyone's to write (whoever may create layers), so they never make a layer the kind's."""
    owners = (layer.get("metadata") or {}).get("ownerReferences") or ()
    return ((instance_of_layer(layer) or ("", ""))[:2] == (group, kind)
            and any(str(o.get("apiVersion", "")).partition("/")[0] == group and o.get("kind") == kind for o in owners))


def orphaned_layers(layers: list[Mapping[str, Any]], group: str, kind: str) -> list[Mapping[str, Any]]:
    """Once no instance of `group`/`kind` is left: its layers that Kubernetes' garbage collector would delete, i.e.
    not being deleted yet, labelled as the kind's, and every owner reference an instance of the kind (a layer with
    another owner, or none, is someone else's to delete, whatever its labels say)."""
    def orphaned(layer: Mapping[str, Any]) -> bool:
        meta = layer.get("metadata") or {}
        owners = meta.get("ownerReferences") or ()
        return (not meta.get("deletionTimestamp") and (instance_of_layer(layer) or ("", ""))[:2] == (group, kind)
                and bool(owners) and all(str(o.get("apiVersion", "")).partition("/")[0] == group
                                         and o.get("kind") == kind for o in owners))

    return [layer for layer in layers if orphaned(layer)]
