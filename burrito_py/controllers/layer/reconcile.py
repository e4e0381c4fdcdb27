"""TerraformLayer reconcile: gather a snapshot (`LayerFacts`), decide (actions.py, pure), execute.

A reconcile that changes nothing makes no API call, which is what keeps thousands of idle layers
cheap: drift detection wakes each layer once when its plan gets stale, not on a polling timer.

Gathering reads the inventory, the CRD watch, the plan review (which may wait for the policy sandbox) and the
upstreams' outputs; deciding is one pure function (`decide_reconcile`); executing makes its writes in order. Two
places decide again, each after the one effect that changes what the decision reads, never otherwise:
- before a run is created, the layer is read fresh from the API (and the CRDs, for a destroy): the runner's
  annotations reach us by watch and may lag, and a finished apply would look undone and run again;
- after a run is created (or its create refused), the status is settled on the layer and runs as the create left
  them (the new run is live: the layer is Running), from the inventory, without another request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

from burrito_py.api import annotations as ann
from burrito_py.api.annotations import parse_plan_run
from burrito_py.api.operations import describe
from burrito_py.controllers import metrics
from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.actions import (
    LayerActions,
    LayerFacts,
    Settlement,
    decide_reconcile,
    holds_finalizer,
    settle,
    sync_windows,
)
from burrito_py.controllers.layer.crd_guard import LAYER_CRD, cached_owners, crd_deletion, look_fresh
from burrito_py.controllers.layer.decide import CreateRun
from burrito_py.controllers.layer.dependencies import MOVED_ON, RETRY_SECONDS, dependency_snapshot, upstream_inputs
from burrito_py.controllers.layer.dependency_decisions import DependencyVerdict, holding_dependents
from burrito_py.controllers.layer.destroy import DESTROY_SKIPPED
from burrito_py.controllers.layer.finalizers import set_destroy_finalizer
from burrito_py.controllers.layer.merged_reviews import merged_reviews
from burrito_py.controllers.layer.outputs import read_outputs_sync, sync_outputs
from burrito_py.controllers.layer.plan_review import read_plan, record_review, review_plan
from burrito_py.controllers.layer.run_creation import EVENT_REASON as RUN_CREATION_EVENT
from burrito_py.controllers.layer.run_creation import RunCreation, announce, refusal_message, refused
from burrito_py.controllers.layer.run_inputs import put_run_inputs
from burrito_py.controllers.layer.run_view import run_view
from burrito_py.controllers.layer.runs import run_body, run_name
from burrito_py.controllers.layer.status import (
    announcements,
    compute_status,
    event_name,
    status_changed,
    status_patch,
)
from burrito_py.controllers.layer.validation import validate_layer
from burrito_py.controllers.run.pod_creation import backoff
from burrito_py.kube.client import KubeError, crd_path
from burrito_py.kube.conditions import Cond
from burrito_py.kube.events import post_event
from burrito_py.kube.inventory import Body, Key
from burrito_py.pullrequests.apply import lock_holder
from burrito_py.timeutil import utcnow

log = logging.getLogger(__name__)


async def reconcile_layer(ctx: Context, key: Key) -> None:
    started = time.perf_counter()
    try:
        await _reconcile(ctx, key)
    except Exception:
        metrics.RECONCILE_ERRORS.labels("layer").inc()
        raise
    finally:
        metrics.RECONCILE_SECONDS.labels("layer").observe(time.perf_counter() - started)


async def _reconcile(ctx: Context, key: Key) -> None:
    facts = await _gather(ctx, key, utcnow())
    if facts is None:
        return
    actions = decide_reconcile(facts)
    await record_review(ctx, facts.layer, facts.review)  # as soon as it is read, whatever this reconcile does next
    if actions.finalizer is not None:
        # Before any run: a layer that might have applied something always holds its finalizer. No decision reads
        # the finalizers: what was decided stands for the layer as the patch returned it.
        changed = await set_destroy_finalizer(ctx, facts.layer, actions.finalizer == "add")
        if changed is None:
            return
        facts = replace(facts, layer=changed)
    if actions.create is not None:
        # The one fresh read (see the module's docstring), then the one decision acted on.
        fresh = await _look_again(ctx, facts)
        if fresh is None:
            return
        facts, actions = fresh, decide_reconcile(fresh)
    await _execute(ctx, facts, actions)


async def _gather(ctx: Context, key: Key, now: datetime) -> LayerFacts | None:
    """The snapshot: from the inventory and the CRD watch (no request), plus the plan review, the upstreams'
    outputs and the layer's own outputs with their Secret (datastore reads and a GET, each once per plan or
    apply). None: nothing is left to reconcile."""
    layer = ctx.inventory.layers.get(key)
    if layer is None:
        return None
    deleting = bool(layer["metadata"].get("deletionTimestamp"))
    if deleting and not holds_finalizer(layer):
        return None  # deleted without a destroy to do: nothing is left for us
    settings = ctx.settings
    repository = ctx.inventory.repository_of(layer)
    runs = ctx.inventory.runs_of_layer(*key)
    review = None
    if not deleting:  # a destroy reviews nothing
        views = {v.name: v for v in map(run_view, runs)}
        policies = await ctx.policies.for_layer(ctx.kube, layer)
        review = review_plan(layer, views, policies, await read_plan(ctx, layer, views, policies), now,
                             settings.admission_policy)
    dependencies = await dependency_snapshot(ctx, layer)
    merged = await merged_reviews(ctx, layer)
    return LayerFacts(
        layer=layer,
        repository=repository,
        validation=validate_layer(layer, repository, settings),
        # The review may have waited for the policy sandbox (§5.9): the runs as they are now (a plan run that
        # ended meanwhile is no longer Running), not as they were before it.
        runs=tuple(ctx.inventory.runs_of_layer(*key)),
        now=now,
        drift_period=settings.drift_detection_period,
        grace=settings.failure_grace_period,
        grace_cap=settings.failure_grace_period_cap,
        public_url=settings.public_url,
        # From the CRD watch: no request. Only "terminating" is trusted from it; see _look_again.
        withdrawn=crd_deletion(layer, ctx.crds.named(LAYER_CRD), cached_owners(layer, ctx.crds)) if deleting else None,
        windows=sync_windows(repository, settings.default_sync_windows),
        review=review,
        dependencies=dependencies,
        dependents=tuple("/".join(k) for k in holding_dependents(key, ctx.inventory.layers.dependents_of(key),
                                                                 settings.allow_cross_namespace_dependencies))
        if deleting else (),
        named_plan_run=_named_plan_run(ctx, layer),
        creation=RunCreation.of(layer.get("status") or {}),
        outputs=await read_outputs_sync(ctx, layer),
        merged=merged,
        locked_by=lock_holder(layer, {pr["metadata"]["name"]: pr for pr in ctx.inventory.pull_requests
                                      if pr["metadata"]["namespace"] == key[0]}),
    )


def _named_plan_run(ctx: Context, layer: Body) -> Body | None:
    """The run of the layer's namespace that its `plan-run` annotation names, from the inventory."""
    named = parse_plan_run((layer["metadata"].get("annotations") or {}).get(ann.PLAN_RUN))
    return ctx.inventory.runs.get((layer["metadata"]["namespace"], named[0])) if named is not None else None


async def _look_again(ctx: Context, facts: LayerFacts) -> LayerFacts | None:
    """`facts` with the layer read fresh from the API, and for a destroy its CRDs too (the layer's deletion event
    may have come before its CRD's; Kubernetes marks the CRD terminating before it deletes any instance)."""
    namespace, name = facts.key
    fresh = await ctx.kube.get(crd_path("terraformlayers", namespace, name))
    if fresh is None:
        return None
    ctx.inventory.layers.observe(fresh)
    layer = ctx.inventory.layers.get(facts.key) or fresh
    withdrawn = facts.withdrawn
    if facts.layer["metadata"].get("deletionTimestamp"):  # a destroy run is next
        withdrawn = await look_fresh(ctx.kube, layer, ctx.crds)
    return replace(facts, layer=layer, withdrawn=withdrawn, named_plan_run=_named_plan_run(ctx, layer),
                   backoff_checked=True)


async def _execute(ctx: Context, facts: LayerFacts, actions: LayerActions) -> None:
    """Carry out `actions`: the run first, then the settlement (after a create, the one made on the layer and runs
    as the create left them)."""
    key, layer, settlement = facts.key, facts.layer, actions.settlement
    if actions.hold_for is not None:
        ctx.wake_layer(key, actions.hold_for)
    if actions.create is not None:
        try:
            executed = await _execute_create(ctx, facts, actions, actions.create)
        except RunCreateRefused as refusal:
            creation = await _run_refused(ctx, key, layer, facts.creation, refusal, facts.now)
            # The same decision, on the layer as the status write before the create left it.
            layer = ctx.inventory.layers.get(key) or layer
            settlement = settle(replace(facts, layer=layer, creation=creation), actions.decision)
        else:
            if executed is None:
                return
            # The run exists: decide on the layer and runs as they are now (from the inventory, no request).
            layer = executed
            facts = replace(facts, layer=layer, runs=tuple(ctx.inventory.runs_of_layer(*key)), creation=RunCreation(),
                            named_plan_run=_named_plan_run(ctx, layer))
            settlement = decide_reconcile(facts).settlement
    elif actions.wake_repository is not None:
        ctx.wake_repository(actions.wake_repository)  # a new branch: resolve it now, not at the next poll
    await _settle(ctx, key, layer, settlement)


async def _settle(ctx: Context, key: Key, layer: Body, settlement: Settlement) -> None:
    namespace = key[0]
    for doomed in settlement.delete_runs:
        try:
            await ctx.kube.delete(crd_path("terraformruns", namespace, doomed))
        except KubeError as exc:
            log.warning("could not delete old run %s/%s: %s", namespace, doomed, exc)
        forgotten = ctx.inventory.runs.get((namespace, doomed))
        if forgotten is not None:
            ctx.inventory.runs.forget(forgotten)
    if settlement.skip_destroy is not None:
        layer = await _mark_skip_destroy(ctx, layer, settlement.skip_destroy)
    if settlement.remove_annotations:
        layer = await _remove_annotations(ctx, layer, dict(settlement.remove_annotations)) or layer
    layer = await _write_status(ctx, layer, settlement.status, settlement.ready)
    ctx.notifications.send(ctx.kube, layer, list(settlement.notifications))
    for type_, reason, message in settlement.events:
        await post_event(ctx.kube, layer, type_, reason, message)
    if settlement.retry_review_in is not None:
        ctx.wake_layer(key, settlement.retry_review_in)
    if settlement.release_finalizer:
        if settlement.release is not None:
            await post_event(ctx.kube, layer, *settlement.release)
        await set_destroy_finalizer(ctx, layer, present=False)
        return
    if settlement.outputs is not None:
        await sync_outputs(ctx, layer, settlement.outputs)  # after a successful apply only: see outputs.py
    if settlement.drift_check_in is not None:
        ctx.wake_layer(key, settlement.drift_check_in)
    if settlement.wake_in is not None:
        ctx.wake_layer(key, settlement.wake_in)


async def _execute_create(ctx: Context, facts: LayerFacts, actions: LayerActions, create: CreateRun) -> Body | None:
    """Carry out a decision to create a run: show the state, create (or adopt) the run, announce it, consume
    the annotations it acted on. The layer as now stored; None when there is nothing more to do now."""
    layer, decision = facts.layer, actions.decision
    namespace, name = facts.key
    if (layer.get("status") or {}).get("state") != decision.state:
        # Show the decision before acting on it: the layer is Running right after, and PlanNeeded or
        # ApplyNeeded would otherwise never be visible (one status write per run created, none at rest).
        ready = facts.validation.ready
        layer = await _write_status(
            ctx, layer, compute_status(layer, decision, ready, facts.runs, facts.now, facts.review), ready)
    created = await _create_run(ctx, layer, create, facts.runs, actions.dependencies)
    if created is None:
        return None
    ctx.inventory.runs.observe(created)
    ctx.wake_run((namespace, created["metadata"]["name"]))
    log.info("layer %s/%s: created %s run %s at %s", namespace, name, create.action, created["metadata"]["name"],
             create.revision)
    await post_event(ctx.kube, layer, "Normal", "RunCreated",
                     f"created {create.action} run {created['metadata']['name']} for revision {create.revision}")
    if create.operation is not None:
        # The audit of a day-2 operation (§5.12): what, who asked, and the run that does it.
        what = describe(create.action, create.operation)
        await post_event(ctx.kube, layer, "Normal", "OperationRequested",
                         f"{what} requested by {create.operation.requested_by}: run {created['metadata']['name']}")
        log.info("layer %s/%s: %s requested by %s: run %s", namespace, name, what, create.operation.requested_by,
                 created["metadata"]["name"])
    # Both are consumed by the run just created: another immediate plan needs a new sync-now, and another
    # apply a new approval, even of a plan with the same sum; an operation request is run once. Each with the value
    # the decision saw: one rewritten meanwhile is a new request, kept for the next decision.
    seen = facts.layer["metadata"].get("annotations") or {}
    consumed = {ann.SYNC_NOW: decision.remove_sync_now, ann.APPROVE_PLAN: decision.remove_approval,
                ann.OVERRIDE_POLICY: decision.remove_approval, ann.OPERATION: decision.remove_operation,
                ann.OPERATION_BY: decision.remove_operation}
    acted_on = {k: seen[k] for k, acted in consumed.items() if acted and k in seen}
    if acted_on:
        return await _remove_annotations(ctx, layer, acted_on) or layer
    return layer


async def _create_run(ctx: Context, layer: Body, create: CreateRun, runs: tuple[Body, ...],
                      deps: DependencyVerdict | None) -> Body | None:
    """Create the decided run under its deterministic name. A 409 means an earlier try of this same decision
    created it (its response was lost): read it back and adopt it, never create a second one. A run given
    upstream outputs gets them in the datastore first (its runner reads them), under the same name."""
    meta = layer["metadata"]
    newest = runs[0]["metadata"]["name"] if runs else None
    name = run_name(layer, create, newest, (meta.get("annotations") or {}).get(ann.SYNC_NOW))
    upstream = await upstream_inputs(ctx, deps) if create.inputs_digest and deps is not None else None
    # What the run is given (its varsFrom values and upstream outputs), stored before it exists: run_inputs.py.
    problem = upstream if isinstance(upstream, str) else await put_run_inputs(ctx, layer, name, upstream)
    if problem is not None:
        # The run would start without its variables: none is created. A datastore refusal is told on the layer
        # (and retried at the outputs' pace); an upstream that applied meanwhile is simply decided again.
        if problem != MOVED_ON:
            await post_event(ctx.kube, layer, "Warning", "InputsNotStored", problem)
        ctx.wake_layer((meta["namespace"], meta["name"]), 1.0 if problem == MOVED_ON else RETRY_SECONDS)
        return None
    try:
        return await ctx.kube.create(crd_path("terraformruns", meta["namespace"]), run_body(layer, create, name))
    except KubeError as exc:
        if exc.status != 409:
            raise RunCreateRefused(create, exc) from None
    existing = await ctx.kube.get(crd_path("terraformruns", meta["namespace"], name))
    if existing is None:
        log.warning("run %s/%s: create said it exists, but it is gone; deciding again", meta["namespace"], name)
        ctx.wake_layer((meta["namespace"], meta["name"]), 1.0)
        return None
    log.info("run %s/%s was already created by an earlier try of this decision: adopted", meta["namespace"], name)
    return existing


class RunCreateRefused(Exception):
    """The API answered a layer's run create with an error other than 409 (run_creation.py)."""

    def __init__(self, create: CreateRun, error: KubeError) -> None:
        super().__init__(str(error))
        self.create, self.error = create, error


async def _run_refused(ctx: Context, key: Key, layer: Body, record: RunCreation, refusal: RunCreateRefused,
                       now: datetime) -> RunCreation:
    """Record a refused run create, say it once per distinct message, and ask again after the backoff."""
    error, create = refusal.error, refusal.create
    message = refusal_message(create.action, error.message or str(error))
    after = refused(record, create.action, create.revision, now, message)
    if announce(record, after):
        # A 403 is a `Forbidden` event, as every 403 the controllers meet (forbidden.py).
        await post_event(ctx.kube, layer, "Warning", "Forbidden" if error.status == 403 else RUN_CREATION_EVENT,
                         message)
    wait = backoff(after.failures, ctx.settings.failure_grace_period, ctx.settings.failure_grace_period_cap)
    log.warning("layer %s/%s: %s (%d in a row; next try in %gs)", key[0], key[1], message, after.failures,
                wait.total_seconds())
    ctx.wake_layer(key, wait)
    return after


async def _remove_annotations(ctx: Context, layer: Body, acted_on: Mapping[str, str]) -> Body | None:
    """Consume requests acted on: each annotation still holding the value acted on is removed (Kube.
    remove_annotations). The layer as now stored; None when it is gone."""
    meta = layer["metadata"]
    updated = await ctx.kube.remove_annotations(crd_path("terraformlayers", meta["namespace"], meta["name"]),
                                                acted_on)
    if updated is not None:
        ctx.inventory.layers.observe(updated)
    return updated


async def _mark_skip_destroy(ctx: Context, layer: Body, reason: str) -> Body:
    """Keep the guard's verdict on the layer while a live run is waited for (a CRD made again meanwhile
    must not turn the destroy back on)."""
    meta = layer["metadata"]
    patch = {"metadata": {"annotations": {ann.SKIP_DESTROY: reason}}}
    updated = await ctx.kube.merge_patch(crd_path("terraformlayers", meta["namespace"], meta["name"]), patch)
    ctx.inventory.layers.observe(updated)
    await post_event(ctx.kube, updated, "Warning", DESTROY_SKIPPED,
                     f"{reason}: no destroy will run; the live run is waited for, then the layer is released")
    return updated


async def _write_status(ctx: Context, layer: Body, status: Body, ready: Cond) -> Body:
    """Patch the status when it changed (announcing state changes); the layer as now stored."""
    old_status = layer.get("status") or {}
    if not status_changed(old_status, status):
        return layer
    meta = layer["metadata"]
    updated = await ctx.kube.merge_patch(crd_path("terraformlayers", meta["namespace"], meta["name"], "status"),
                                         status_patch(old_status, status))
    ctx.inventory.layers.observe(updated)
    for type_, reason, message in announcements(old_status, status, ready):
        await post_event(ctx.kube, layer, type_, reason, message, name=event_name(meta["name"], status, reason))
    reviewed = status.get("reviewedPlan") or {}
    if reviewed and reviewed != old_status.get("reviewedPlan") and reviewed.get("pullRequest"):
        # The pull request tells what its merge meant for this layer (pullrequest/reconcile.py).
        ctx.wake_pull_request((meta["namespace"], str(reviewed["pullRequest"])))
    return updated
