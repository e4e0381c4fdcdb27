"""Deleting a layer with `destroyResourcesOnDeletion`: destroy its resources first (pure).

The controller keeps the finalizer `terraform.burrito-py.io/destroy` on such a layer. Once the layer is
being deleted it creates a plan run with `spec.destroy` (`terraform plan -destroy`) at the layer's
branch-commit, then an apply run of exactly that plan, then removes the finalizer, and Kubernetes removes
the layer and, through their owner references, its runs.

Decisions (docs/architecture.md §5.7):
- Deleting the layer is the approval: the destroy plan is applied whatever `approvePlan`/`autoApply` say
  (a person or the AGL asked for the resources to go; waiting for a second approval would only leave a
  terminating object behind).
- A destroy plan that says "No changes." (nothing in the state) needs no apply.
- A run of the layer still live when the deletion starts (say an apply) is waited for, never raced.
- A destroy plan or apply that fails after its retries leaves the layer in place, `MaxRetriesReached` with
  `HasDestroyFailed` naming the run and its error. Deleting it again changes nothing in Kubernetes (no
  event), so a failed destroy is retried, once per trigger, when the layer's branch-commit changes (a
  fixing commit), when `api.burrito-py.io/sync-now` is set, or when the layer's spec changes
  (`metadata.generation`). Turning `destroyResourcesOnDeletion` off removes the finalizer without destroying.
- A layer that never got a branch-commit never ran anything: there is nothing to destroy.
- Layers that depend on it (`spec.dependsOn`) and still exist are waited for (`WaitingForDependents`): a set
  deleted together is destroyed leaves first (docs/architecture.md §5.11). No finalizer is put on another layer.
- Deleting a CRD is never a destroy request (controllers/layer/crd_guard.py says when a deletion comes from one):
  no destroy run is created, and the finalizer is released with a `DestroySkipped` Warning; the resources
  stay in the Terraform state. A run already live is waited for first, whatever it is: an apply (a destroy
  apply included) cannot be stopped halfway without leaving a held lock and a half-changed state, and a
  plan ends soon; a destroy plan, finished or not, is never applied. A destroy apply that had already
  succeeded is reported as `Destroyed`, as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from burrito_py.api import annotations as ann
from burrito_py.api.annotations import parse_plan_run
from burrito_py.api.layer import LayerState
from burrito_py.controllers.layer.artifact_check import LayerIdentity, artifact_refusal
from burrito_py.controllers.layer.decide import NO_CHANGES, CreateRun, LayerDecision
from burrito_py.controllers.layer.run_view import RunView
from burrito_py.kube.conditions import Cond

DESTROY_FINALIZER = "terraform.burrito-py.io/destroy"
DESTROY_SKIPPED = "DestroySkipped"
DESTROY_PLAN_REFUSED = "DestroyPlanRefused"
FinalizerChange = Literal["add", "remove"]


def finalizer_change(destroy_on_deletion: bool, finalizers: Sequence[str], deleting: bool) -> FinalizerChange | None:
    """How the layer's own finalizer must change outside of the destroy itself.

    Added while the layer lives with the flag on (never once it is being deleted: Kubernetes refuses new
    finalizers then); removed whenever the flag is off, deleting or not.
    """
    present = DESTROY_FINALIZER in finalizers
    if destroy_on_deletion and not present and not deleting:
        return "add"
    if not destroy_on_deletion and present:
        return "remove"
    return None


@dataclass(frozen=True, slots=True)
class DestroySnapshot:
    annotations: dict[str, str]
    runs: tuple[RunView, ...]  # newest first
    generation: int
    destroy_on_deletion: bool
    # Why the deletion comes from a CRD's deletion (crd_guard.crd_deletion), None when it does not.
    crd_deletion: str | None = None
    # Layers that depend on this one and still exist (`<namespace>/<name>`): its destroy waits for them.
    dependents: tuple[str, ...] = ()
    # The layer, and the run `plan-run` names: a destroy plan is applied only if the artifact check passes.
    identity: LayerIdentity | None = None
    named_plan_run: RunView | None = None


def _decision(
    state: LayerState,
    reason: str,
    message: str,
    *,
    live: RunView | None = None,
    failed: bool = False,
    create: CreateRun | None = None,
    remove_sync_now: bool = False,
    remove_finalizer: bool = False,
    skip_destroy: str | None = None,
) -> LayerDecision:
    conditions = (
        Cond(
            "IsRunning",
            live is not None,
            "RunInProgress" if live is not None else "NoRunInProgress",
            f"run {live.name} is {live.state or 'starting'}" if live is not None else "",
        ),
        Cond("HasDestroyFailed", failed, reason, message),
    )
    return LayerDecision(
        state,
        conditions,
        create,
        remove_sync_now=remove_sync_now,
        remove_finalizer=remove_finalizer,
        skip_destroy=skip_destroy,
    )


def decide_destroy(snap: DestroySnapshot) -> LayerDecision:
    """The next step of deleting a layer that holds the destroy finalizer."""
    a = snap.annotations
    if not snap.destroy_on_deletion:
        return _decision("Idle", "DestroyNotRequested", "destroyResourcesOnDeletion is off", remove_finalizer=True)

    live = next((r for r in snap.runs if not r.terminal), None)
    if snap.crd_deletion is not None:
        return _skip_destroy(snap, snap.crd_deletion, live)
    if live is not None:
        what = ("destroy " if live.destroy else "") + live.action
        return _decision("Running", "WaitingForRun", f"waiting for {what} run {live.name}", live=live)
    if snap.dependents:
        # Reverse order: what is built on this layer's resources goes first. The index only lists layers that
        # exist, so a dependent once gone can never hold this destroy.
        shown = ", ".join(snap.dependents[:5]) + (f" and {len(snap.dependents) - 5} more"
                                                  if len(snap.dependents) > 5 else "")
        return _decision("Idle", "WaitingForDependents",
                         f"waiting for the layers that depend on it to be deleted first: {shown}; or set "
                         "destroyResourcesOnDeletion to false to delete it without destroying")

    target = a.get(ann.BRANCH_COMMIT) or a.get(ann.APPLY_COMMIT) or a.get(ann.PLAN_COMMIT)
    if target is None:
        return _decision("Idle", "NothingToDestroy", "the layer never ran", remove_finalizer=True)

    sync_now = ann.SYNC_NOW in a
    plan_again = _decision(
        "PlanNeeded",
        "DestroyPlanNeeded",
        f"planning the destruction of every resource at {target}",
        create=CreateRun("plan", target, destroy=True),
        remove_sync_now=sync_now,
    )
    last = next((r for r in snap.runs if r.destroy), None)
    if last is None:
        return plan_again

    if last.failed:
        changed = last.revision != target or (
            last.layer_generation is not None and last.layer_generation != snap.generation
        )
        if sync_now or changed:
            return plan_again
        what = "destroy plan" if last.action == "plan" else "destroy apply"
        return _decision(
            "MaxRetriesReached",
            "DestroyFailed",
            f"{what} run {last.name} failed after its last retry: {last.message}".rstrip(": ")
            + f"; the layer stays until a destroy succeeds: push a fix, annotate it with {ann.SYNC_NOW}, or set "
            "destroyResourcesOnDeletion to false to delete it without destroying",
            failed=True,
        )

    if last.action == "apply":
        return _decision("Idle", "Destroyed", f"destroy apply run {last.name} succeeded", remove_finalizer=True)

    planned = parse_plan_run(a.get(ann.PLAN_RUN))
    if planned is None or planned[0] != last.name:
        # The runner annotates before its pod ends; a lagging view of the layer catches up by watch.
        return _decision("Idle", "WaitingForDestroyPlan", f"waiting for the plan of run {last.name}")
    if a.get(ann.PLAN_SUMMARY) == NO_CHANGES:
        return _decision(
            "Idle", "NothingToDestroy", f"destroy plan run {last.name} found nothing to destroy", remove_finalizer=True
        )
    if snap.identity is not None:
        # The destroy plan is applied only as any plan is: one the controllers made and recorded (artifact_check).
        named = snap.named_plan_run if snap.named_plan_run is not None else last
        refusal = artifact_refusal(snap.identity, a.get(ann.PLAN_RUN), a.get(ann.PLAN_SUM), named)
        if refusal is not None:
            return _decision(
                "PlanNeeded", DESTROY_PLAN_REFUSED,
                f"the destroy plan {a.get(ann.PLAN_RUN)!r} is never applied: {refusal}; planning the destruction "
                "again", create=CreateRun("plan", target, destroy=True), remove_sync_now=sync_now,
            )
    return _decision(
        "ApplyNeeded",
        "DestroyApplyNeeded",
        f"applying destroy plan {a.get(ann.PLAN_SUM)} of run {last.name}",
        create=CreateRun("apply", last.revision or target, planned[0], planned[1], destroy=True,
                         plan_sum=a.get(ann.PLAN_SUM)),
        remove_sync_now=sync_now,
    )


def _skip_destroy(snap: DestroySnapshot, reason: str, live: RunView | None) -> LayerDecision:
    """A CRD's deletion is behind the layer's: no destroy run, ever; release once no run is live."""
    if live is not None:
        what = ("destroy " if live.destroy else "") + live.action
        mark = None if snap.annotations.get(ann.SKIP_DESTROY) == reason else reason
        return _decision(
            "Running",
            "WaitingForRun",
            f"waiting for {what} run {live.name} to end, then releasing the layer without a destroy: {reason}",
            live=live,
            skip_destroy=mark,
        )
    last = next((r for r in snap.runs if r.destroy), None)
    if last is not None and last.action == "apply" and last.state == "Succeeded":
        return _decision("Idle", "Destroyed", f"destroy apply run {last.name} succeeded", remove_finalizer=True)
    return _decision(
        "Idle",
        DESTROY_SKIPPED,
        f"{reason}; deleting a CustomResourceDefinition is never a destroy request: the layer is released "
        "without destroying its resources, which stay in its Terraform state",
        remove_finalizer=True,
    )
