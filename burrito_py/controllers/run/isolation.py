"""Runs the controllers refuse outright (docs/architecture.md §6.1): a run may only work for a layer of its own
namespace, and only when that layer may use its repository. Such a run ends Failed at once with a condition
and a Warning event; it never gets a runner pod and never touches a layer's Lease.

Why in the controller too, not only in the CRD: a CRD's CEL rules cannot read `metadata.namespace` (only
`name` and `generateName` are visible to them), and a run created before a rule or by a privileged client
would still reach the controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.validation import repository_refusal
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.kube.client import crd_path
from burrito_py.kube.conditions import Cond, merge_conditions
from burrito_py.kube.events import post_event
from burrito_py.kube.inventory import Body
from burrito_py.timeutil import utcnow


def run_refusal(
    run: Mapping[str, Any],
    layer: Mapping[str, Any] | None,
    repository: Mapping[str, Any] | None,
    settings: ControllerSettings,
) -> Cond | None:
    """The HasSucceeded=False condition of a run the controllers must never start, else None. Pure.
    `layer` and `repository` are what the run names (None when absent or not looked up)."""
    namespace = run["metadata"]["namespace"]
    other = (((run.get("spec") or {}).get("layer") or {}).get("namespace")) or namespace
    if other != namespace:
        return Cond(
            "HasSucceeded",
            False,
            "CrossNamespaceLayer",
            f"spec.layer.namespace: {other!r} is not the run's namespace {namespace!r}: a TerraformRun may only "
            "work for a layer of its own namespace",
        )
    if layer is not None:
        refused = repository_refusal(layer, repository, settings)
        if refused is not None:
            return Cond("HasSucceeded", False, refused.reason, f"layer {layer['metadata']['name']}: {refused.message}")
    return None


async def refuse_run(ctx: Context, run: Body, layer: Body | None, repository: Body | None) -> bool:
    """Mark the run Failed when `run_refusal` refuses it (once; later calls write nothing). True when refused:
    the caller must then do nothing else with it."""
    refusal = run_refusal(run, layer, repository, ctx.settings)
    if refusal is None:
        return False
    status: Body = dict(run.get("status") or {})
    if status.get("state") in ("Succeeded", "Failed"):
        return True  # a run that already ended (e.g. before the settings changed) is left as it is
    now: datetime = utcnow()
    conditions = (
        Cond("HasStatus", True, "StatusKnown"),
        refusal,
        Cond("IsRunning", False, "NoActivePod"),
    )
    merged = merge_conditions(status.get("conditions"), conditions, now)
    new_status = {**status, "state": "Failed", "conditions": merged}
    meta = run["metadata"]
    updated = await ctx.kube.merge_patch(
        crd_path("terraformruns", meta["namespace"], meta["name"], "status"), {"status": new_status}
    )
    ctx.inventory.runs.observe(updated)
    await post_event(ctx.kube, run, "Warning", "RunRefused", refusal.message)
    return True

