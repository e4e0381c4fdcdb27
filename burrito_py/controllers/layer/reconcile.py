"""TerraformLayer reconcile: gather a snapshot from the inventory, decide (pure), act.

A reconcile that changes nothing makes no API call, which is what keeps thousands of idle layers
cheap: drift detection wakes each layer once when its plan gets stale, not on a polling timer.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.api.annotations import parse_plan_run
from burrito_py.api.common import SyncWindow
from burrito_py.controllers import metrics
from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.artifact_check import CONDITION as ARTIFACT_CONDITION
from burrito_py.controllers.layer.artifact_check import REFUSED as ARTIFACT_REFUSED
from burrito_py.controllers.layer.artifact_check import LayerIdentity
from burrito_py.controllers.layer.crd_guard import LAYER_CRD, cached_owners, crd_deletion, look_fresh
from burrito_py.controllers.layer.decide import (
    RETRY_LIMIT,
    CreateRun,
    Exhaustion,
    LayerDecision,
    LayerSnapshot,
    decide_layer,
)
from burrito_py.controllers.layer.dependencies import MOVED_ON, RETRY_SECONDS, dependency_snapshot, upstream_inputs
from burrito_py.controllers.layer.dependency_decisions import DependencyVerdict, judge_dependencies
from burrito_py.controllers.layer.destroy import (
    DESTROY_FINALIZER,
    DESTROY_PLAN_REFUSED,
    DESTROY_SKIPPED,
    DestroySnapshot,
    decide_destroy,
    finalizer_change,
)
from burrito_py.controllers.layer.drift import drift_due
from burrito_py.controllers.layer.finalizers import set_destroy_finalizer
from burrito_py.controllers.layer.notifications import layer_link, notifications_due
from burrito_py.controllers.layer.outputs import sync_outputs
from burrito_py.controllers.layer.plan_review import Review, gate_of, review_plan
from burrito_py.controllers.layer.run_creation import EVENT_REASON as RUN_CREATION_EVENT
from burrito_py.controllers.layer.run_creation import (
    RunCreation,
    announce,
    api_message_of,
    next_try,
    refusal_message,
    refused,
    wait_before_creating,
)
from burrito_py.controllers.layer.run_creation import condition as run_creation_condition
from burrito_py.controllers.layer.run_creation import last_result as run_creation_result
from burrito_py.controllers.layer.run_inputs import put_run_inputs
from burrito_py.controllers.layer.run_view import RunView
from burrito_py.controllers.layer.sync_windows import Window
from burrito_py.controllers.layer.validation import LayerValidation, validate_layer
from burrito_py.controllers.run.pod_creation import backoff, blocked_message
from burrito_py.kube.client import KubeError, crd_path
from burrito_py.kube.conditions import Cond, merge_conditions
from burrito_py.kube.events import post_event
from burrito_py.kube.inventory import Body, Key
from burrito_py.timeutil import format_time_precise, parse_time, utcnow

log = logging.getLogger(__name__)
STATUS_KEYS = (
    "state",
    "conditions",
    "lastResult",
    "lastRun",
    "latestRuns",
    "lastPlan",
    "pendingPlan",
    "exhaustedPlan",
    "exhaustedApply",
    "policy",
    "drift",
    "notified",
    "appliedRevision",
    "dependencies",
    "inputsDigest",
    "runCreation",
)


def run_view(run: Mapping[str, Any]) -> RunView:
    spec, status = run.get("spec") or {}, run.get("status") or {}
    conditions = status.get("conditions") or ()
    message = next((c.get("message", "") for c in conditions if c.get("type") == "HasSucceeded"), "")
    annotations = run["metadata"].get("annotations") or {}
    generation = annotations.get(ann.RUN_LAYER_GENERATION, "")
    succeeded: Mapping[str, Any] = next((c for c in conditions if c.get("type") == "HasSucceeded"), {})
    attempts = [a for a in status.get("attempts") or () if isinstance(a, Mapping)]
    # The last attempt, when it succeeded: what the run's status records as its result.
    result: Mapping[str, Any] = attempts[-1] if attempts and attempts[-1].get("exitCode") == 0 else {}
    return RunView(
        name=run["metadata"]["name"],
        action=spec.get("action", "plan"),
        state=status.get("state"),
        revision=(spec.get("layer") or {}).get("revision"),
        created=run["metadata"].get("creationTimestamp", ""),
        message=message,
        destroy=bool(spec.get("destroy")),
        artifact=(spec.get("artifact") or {}).get("run"),
        layer_generation=int(generation) if generation.isdigit() else None,
        relevant_commit=annotations.get(ann.RUN_RELEVANT_COMMIT) or None,
        plan_sum=annotations.get(ann.RUN_PLAN_SUM) or None,
        reason=succeeded.get("reason", "") if status.get("state") == "Failed" else "",
        inputs_digest=annotations.get(ann.RUN_INPUTS_DIGEST) or None,
        changes_digest=annotations.get(ann.RUN_CHANGES_DIGEST) or None,
        sync_requested=ann.RUN_SYNC_NOW in annotations,
        owners=tuple(str(ref.get("uid")) for ref in run["metadata"].get("ownerReferences") or ()
                     if ref.get("kind") == "TerraformLayer" and ref.get("uid")),
        layer_label=(run["metadata"].get("labels") or {}).get(ann.LABEL_LAYER),
        layer_name=str((spec.get("layer") or {}).get("name") or ""),
        layer_namespace=(spec.get("layer") or {}).get("namespace") or run["metadata"].get("namespace"),
        pull_request=spec.get("pullRequest") or None,
        result_attempt=int(result["number"]) if result.get("number") else None,
        result_sum=result.get("planSum"),
        result_json_sum=result.get("planJsonSum"),
        result_json_size=result.get("planJsonSize"),
    )


def exhaustion_record(value: Mapping[str, Any] | None) -> Exhaustion | None:
    """`status.exhaustedPlan` / `status.exhaustedApply` as the decision reads it."""
    if not value or not value.get("run"):
        return None
    return Exhaustion(
        run=str(value["run"]),
        key=str(value.get("key") or ""),
        reason=str(value.get("reason") or RETRY_LIMIT),
        message=str(value.get("message") or ""),
        relevant_commit=value.get("relevantCommit"),
        stale_count=int(value.get("staleCount") or 0),
        changes_digest=value.get("changesDigest"),
        inputs_digest=value.get("inputsDigest"),
    )


def exhaustion_status(record: Exhaustion | None) -> Body | None:
    if record is None:
        return None
    body: Body = {"run": record.run, "key": record.key, "reason": record.reason, "message": record.message[:1000]}
    if record.relevant_commit:
        body["relevantCommit"] = record.relevant_commit
    if record.stale_count:
        body["staleCount"] = record.stale_count
    if record.changes_digest:
        body["changesDigest"] = record.changes_digest
    if record.inputs_digest:
        body["inputsDigest"] = record.inputs_digest
    return body


def sync_windows(repository: Mapping[str, Any] | None, defaults: Sequence[SyncWindow]) -> tuple[Window, ...]:
    """The repository's sync windows plus the controller-wide defaults (burrito merges them the same way)."""
    own = ((repository or {}).get("spec") or {}).get("syncWindows") or ()
    specs = [*own, *(w.to_dict() for w in defaults)]
    return tuple(Window.from_spec(spec) for spec in specs)


def snapshot(
    layer: Mapping[str, Any],
    runs: Sequence[Mapping[str, Any]],
    auto_apply: bool,
    drift: timedelta,
    windows: tuple[Window, ...] = (),
    review: Review | None = None,
    drift_remediation: str = "detect",
    dependencies: DependencyVerdict | None = None,
    named_plan_run: Mapping[str, Any] | None = None,
) -> LayerSnapshot:
    """`review`: this reconcile's review of the plan; without one, the status's (what the last reconcile wrote).
    `named_plan_run`: the run of the layer's namespace that `plan-run` names, whichever layer (or pull request) it
    belongs to (the artifact check says why it may not be applied)."""
    views = [run_view(r) for r in runs]  # newest first
    annotations = dict(layer["metadata"].get("annotations") or {})
    status = layer.get("status") or {}
    current = parse_plan_run(annotations.get(ann.PLAN_RUN))
    plan_run = next((v for v in views if current is not None and v.name == current[0]), None)
    named = run_view(named_plan_run) if named_plan_run is not None else plan_run
    return LayerSnapshot(
        annotations=annotations,
        last_run=views[0] if views else None,
        last_plan_run=next((v for v in views if v.action == "plan"), None),
        last_apply_run=next((v for v in views if v.action == "apply"), None),
        auto_apply=auto_apply,
        drift_period=drift,
        active_run=next((v for v in views if not v.terminal), None),
        plan_run=plan_run,
        exhausted_plan=exhaustion_record(status.get("exhaustedPlan")),
        exhausted_apply=exhaustion_record(status.get("exhaustedApply")),
        windows=windows,
        layer_name=layer["metadata"]["name"],
        drift_key=drift_key(layer),
        gate=gate_of(review.policy if review is not None else status.get("policy"), annotations),
        drift_remediation=drift_remediation,
        dependencies=dependencies,
        plan_inputs_digest=plan_run.inputs_digest if plan_run is not None else status.get("inputsDigest"),
        identity=identity(layer),
        named_plan_run=named,
    )


def identity(layer: Mapping[str, Any]) -> LayerIdentity:
    meta = layer["metadata"]
    return LayerIdentity(str(meta.get("uid") or ""), str(meta.get("namespace") or ""), str(meta["name"]))


def named_plan_run(ctx: Context, layer: Mapping[str, Any]) -> Body | None:
    """The run of the layer's namespace that its `plan-run` annotation names, from the inventory."""
    named = parse_plan_run((layer["metadata"].get("annotations") or {}).get(ann.PLAN_RUN))
    return ctx.inventory.runs.get((layer["metadata"]["namespace"], named[0])) if named is not None else None


def drift_key(layer: Mapping[str, Any]) -> str:
    meta = layer["metadata"]
    return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta['name']}")


def decide(
    layer: Mapping[str, Any], runs: Sequence[Mapping[str, Any]], validation: LayerValidation, drift: timedelta,
    now: datetime, withdrawn: str | None = None, windows: tuple[Window, ...] = (), review: Review | None = None,
    dependencies: DependencyVerdict | None = None, dependents: tuple[str, ...] = (),
    plan_run: Mapping[str, Any] | None = None,
) -> LayerDecision:
    """The destroy sequence once the layer is being deleted (it holds our finalizer), else the normal loop.

    `withdrawn`: why the deletion comes from a CRD's deletion (crd_guard), which skips the destroy.
    `dependencies`: how its upstreams stand; `dependents`: the layers that depend on it and exist.
    `plan_run`: the run `plan-run` names (`named_plan_run`), for the artifact check."""
    meta = layer["metadata"]
    if meta.get("deletionTimestamp"):
        views = tuple(run_view(r) for r in runs)
        annotations = dict(meta.get("annotations") or {})
        generation = int(meta.get("generation") or 0)
        decision = decide_destroy(
            DestroySnapshot(annotations, views, generation, validation.destroy_on_deletion, withdrawn, dependents,
                            identity=identity(layer),
                            named_plan_run=run_view(plan_run) if plan_run is not None else None)
        )
        if decision.create_run is not None and dependencies is not None and dependencies.inputs_digest:
            # A destroy plan reads the variables too: the last known upstream outputs.
            decision = replace(decision, create_run=replace(decision.create_run,
                                                            inputs_digest=dependencies.inputs_digest))
        return decision
    return decide_layer(snapshot(layer, runs, validation.auto_apply, drift, windows, review,
                                 validation.drift_remediation, dependencies, plan_run), now)


MAX_RUN_PREFIX = 40


def run_name(layer: Mapping[str, Any], create: CreateRun, newest_run: str | None, sync_now: str | None) -> str:
    """One decision → one name, so a create whose response was lost is found again (409) and adopted.

    The hash covers what makes the decision: the layer (uid), action, revision and plan sum, the sync-now
    request, and the newest run of the layer: once a run is created it is the newest, so the next decision
    (a drift or sync-now plan at the same revision) gets another name, while a retried decision (the watch has
    not shown the new run yet) gets the same one. The layer name is cut to keep the run name a valid label
    value (≤ 63) for `<run>` and its pods `<run>-<attempt>`."""
    meta = layer["metadata"]
    parts = (meta.get("uid", ""), meta["namespace"], meta["name"], create.action, create.revision,
             create.plan_sum or "", "destroy" if create.destroy else "", newest_run or "", sync_now or "")
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]
    prefix = meta["name"][:MAX_RUN_PREFIX].rstrip("-.")
    return f"{prefix}-{create.action}-{digest}"


def run_body(layer: Mapping[str, Any], create: CreateRun, name: str | None = None) -> Body:
    meta = layer["metadata"]
    spec: Body = {
        "action": create.action,
        "layer": {"name": meta["name"], "namespace": meta["namespace"], "revision": create.revision},
    }
    if create.artifact_run is not None:
        # The sum the run controller recorded for that attempt: the runner applies only a plan of this sum.
        spec["artifact"] = {"run": create.artifact_run, "attempt": create.artifact_attempt,
                            **({"sum": create.plan_sum} if create.plan_sum else {})}
    if create.destroy:
        spec["destroy"] = True
    annotations = {
        ann.RUN_CREATED_AT: format_time_precise(utcnow()),
        ann.RUN_LAYER_GENERATION: str(meta.get("generation") or 0),
    }
    if create.relevant_commit:
        annotations[ann.RUN_RELEVANT_COMMIT] = create.relevant_commit
    if create.plan_sum:
        annotations[ann.RUN_PLAN_SUM] = create.plan_sum
    if create.inputs_digest:
        annotations[ann.RUN_INPUTS_DIGEST] = create.inputs_digest
    if create.changes_digest:
        annotations[ann.RUN_CHANGES_DIGEST] = create.changes_digest
    if create.sync_requested:
        annotations[ann.RUN_SYNC_NOW] = (meta.get("annotations") or {}).get(ann.SYNC_NOW) or "true"
    metadata: Body = {
        "namespace": meta["namespace"],
        "labels": {ann.LABEL_LAYER: ann.layer_label(meta["name"])},
        "annotations": annotations,
        "ownerReferences": [
            {
                "apiVersion": layer.get("apiVersion", ann.API_VERSION),
                "kind": "TerraformLayer",
                "name": meta["name"],
                "uid": meta["uid"],
                "blockOwnerDeletion": True,
            }
        ],
    }
    if name is not None:
        metadata["name"] = name
    else:
        metadata["generateName"] = f"{meta['name'][:MAX_RUN_PREFIX]}-{create.action}-"
    return {"apiVersion": ann.API_VERSION, "kind": "TerraformRun", "metadata": metadata, "spec": spec}


def _run_ref(run: Mapping[str, Any]) -> Body:
    view = run_view(run)
    return {"name": view.name, "action": view.action, "date": view.created or None, "revision": view.revision}


def last_result(previous: str | None, annotations: Mapping[str, str], last: RunView | None,
                reviewed: Mapping[str, Any] | None = None) -> str | None:
    """`reviewed`: `status.policy.plan`, the controllers' own reading of the plan (§5.9); its summary wins over
    the runner's annotation for the plan it is about."""
    if last is None:
        return previous
    if last.state == "Failed":
        return f"{last.action.capitalize()} failed: {last.message}"[:300].rstrip(": ")
    if last.state == "Succeeded":
        summary = annotations.get(ann.PLAN_SUMMARY, "")
        if reviewed and reviewed.get("summary") and reviewed.get("planSum") == annotations.get(ann.PLAN_SUM):
            summary = str(reviewed["summary"])
        return f"Applied: {summary}".rstrip(": ") if last.action == "apply" else (summary or "Plan succeeded")
    return previous


def compute_status(
    layer: Mapping[str, Any], decision: LayerDecision, ready: Cond, runs: Sequence[Body], now: datetime,
    review: Review | None = None,
) -> Body:
    old = layer.get("status") or {}
    a = layer["metadata"].get("annotations") or {}
    views = [run_view(r) for r in runs]
    status: Body = {
        "state": decision.state,
        "conditions": merge_conditions(old.get("conditions"), (ready, *decision.conditions), now),
        "lastResult": last_result(old.get("lastResult"), a, views[0] if views else None,
                                  ((review.policy if review is not None else old.get("policy")) or {}).get("plan")),
        # A live run whose pod the API refuses says why (runs helper, issue 11 item 9): not a silent Running.
        **({"lastResult": blocked} if runs and (blocked := blocked_message(runs[0])) else {}),
        "lastRun": _run_ref(runs[0]) if runs else None,
        "latestRuns": [_run_ref(r) for r in runs],
        "lastPlan": None,
        "exhaustedPlan": exhaustion_status(decision.exhausted_plan),
        "exhaustedApply": exhaustion_status(decision.exhausted_apply),
        "policy": review.policy if review is not None else old.get("policy"),
        "drift": review.drift if review is not None else old.get("drift"),
        "notified": old.get("notified"),
        "appliedRevision": decision.applied_revision,
        "dependencies": ([s.to_status() for s in decision.dependencies.standings]
                         if decision.dependencies is not None else None),
        "inputsDigest": decision.inputs_digest,
        "runCreation": old.get("runCreation"),  # the reconcile sets it (run_creation.py); kept otherwise
    }
    if a.get(ann.PLAN_SUM):
        plan_run = parse_plan_run(a.get(ann.PLAN_RUN))
        status["lastPlan"] = {
            "sum": a[ann.PLAN_SUM],
            "revision": a.get(ann.PLAN_COMMIT),
            "date": a.get(ann.PLAN_DATE),
            "run": plan_run[0] if plan_run else None,
        }
    if decision.pending_plan is not None:
        pending = decision.pending_plan
        status["pendingPlan"] = {"sum": pending.sum, "run": pending.run, "revision": pending.revision,
                                 **({"reason": pending.reason} if pending.reason else {})}
    return {k: v for k, v in status.items() if v is not None}


def runs_to_delete(runs: Sequence[Body], keep: int, annotations: Mapping[str, str]) -> list[Body]:
    """Older runs beyond `keep`, never a live one, the one holding the plan an apply would use, nor the last
    apply (its relevant commit tells a drift correction from a code change: plan_review.py)."""
    protected = {found[0] for key in (ann.PLAN_RUN, ann.APPLY_RUN)
                 if (found := parse_plan_run(annotations.get(key))) is not None}
    doomed = []
    for run in runs[keep:]:
        view = run_view(run)
        if not view.terminal or view.name in protected:
            continue
        doomed.append(run)
    return doomed


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
    layer = ctx.inventory.layers.get(key)
    if layer is None:
        return
    deleting = bool(layer["metadata"].get("deletionTimestamp"))
    finalizers = layer["metadata"].get("finalizers") or ()
    if deleting and DESTROY_FINALIZER not in finalizers:
        return  # deleted without a destroy to do: nothing is left for us
    namespace, name = key
    now = utcnow()
    repository = ctx.inventory.repository_of(layer)
    validation = validate_layer(layer, repository, ctx.settings)
    change = finalizer_change(validation.destroy_on_deletion, finalizers, deleting)
    if change is not None:
        # Before any run: a layer that might have applied something always holds its finalizer.
        changed = await set_destroy_finalizer(ctx, layer, change == "add")
        if changed is None:
            return
        layer = changed
    drift = ctx.settings.drift_detection_period
    runs = ctx.inventory.runs_of_layer(namespace, name)
    # From the CRD watch: no request. Only "terminating" is trusted from it; see the fresh look below.
    withdrawn = crd_deletion(layer, ctx.crds.named(LAYER_CRD), cached_owners(layer, ctx.crds)) if deleting else None
    windows = sync_windows(repository, ctx.settings.default_sync_windows)
    review = None if deleting else await review_plan(
        ctx, layer, {v.name: v for v in map(run_view, runs)}, await ctx.policies.for_layer(ctx.kube, layer), now)
    deps_snapshot = await dependency_snapshot(ctx, layer)
    deps = judge_dependencies(deps_snapshot) if deps_snapshot is not None else None
    # The review may have waited for the policy sandbox (§5.9): decide on the runs as they are now (a plan run
    # that ended meanwhile is no longer Running), not as they were before it.
    runs = ctx.inventory.runs_of_layer(namespace, name)
    dependents = tuple("/".join(k) for k in ctx.inventory.layers.dependents_of(key)) if deleting else ()
    decision = decide(layer, runs, validation, drift, now, withdrawn, windows, review, deps, dependents,
                      named_plan_run(ctx, layer))
    # A run the API refused to create is asked for again only after its backoff (run_creation.py).
    creation = RunCreation.of(layer.get("status") or {})
    grace, grace_cap = ctx.settings.failure_grace_period, ctx.settings.failure_grace_period_cap
    held_back = False
    if validation.ready.status and decision.create_run is not None:
        wait = wait_before_creating(creation, decision.create_run.action, decision.create_run.revision, now, grace,
                                    grace_cap)
        if wait is not None:
            held_back = True
            ctx.wake_layer(key, wait)

    if validation.ready.status and decision.create_run is not None and not held_back:
        # Runs finish through our own writes, but the runner's plan/apply annotations reach us by watch and
        # may lag: read the layer fresh before acting, or a finished apply would look undone and run again.
        fresh = await ctx.kube.get(crd_path("terraformlayers", namespace, name))
        if fresh is None:
            return
        ctx.inventory.layers.observe(fresh)
        layer = ctx.inventory.layers.get(key) or fresh
        if deleting:
            # A destroy run is next. The layer's deletion event may have come before its CRD's: read the
            # CRDs fresh (Kubernetes marks the CRD terminating before it deletes any instance).
            withdrawn = await look_fresh(ctx.kube, layer, ctx.crds)
        decision = decide(layer, runs, validation, drift, now, withdrawn, windows, review, deps, dependents,
                          named_plan_run(ctx, layer))
    if validation.ready.status and decision.create_run is not None and not held_back:
        try:
            executed = await _execute_create(ctx, layer, decision, decision.create_run, validation, runs, now,
                                             review, deps)
        except RunCreateRefused as refusal:
            creation = await _run_refused(ctx, key, layer, creation, refusal, now)
            layer = ctx.inventory.layers.get(key) or layer
        else:
            if executed is None:
                return
            layer = executed
            creation = RunCreation()
            runs = ctx.inventory.runs_of_layer(namespace, name)
            decision = decide(layer, runs, validation, drift, now, withdrawn, windows, review, deps, dependents,
                              named_plan_run(ctx, layer))
    elif decision.state is None and repository is not None and not _branch_synced(repository, layer):
        ctx.wake_repository(_repository_key(layer))  # a new branch: resolve it now, not at the next poll

    for doomed in runs_to_delete(runs, validation.runs_to_keep, layer["metadata"].get("annotations") or {}):
        try:
            await ctx.kube.delete(crd_path("terraformruns", namespace, doomed["metadata"]["name"]))
        except KubeError as exc:
            log.warning("could not delete old run %s/%s: %s", namespace, doomed["metadata"]["name"], exc)
        ctx.inventory.runs.forget(doomed)
    if len(runs) > validation.runs_to_keep:
        runs = ctx.inventory.runs_of_layer(namespace, name)

    if decision.skip_destroy is not None:
        layer = await _mark_skip_destroy(ctx, layer, decision.skip_destroy)
    if creation.failures and decision.create_run is None and decision.state not in ("PlanNeeded", "ApplyNeeded"):
        creation = RunCreation()  # the layer no longer wants a run: nothing is refused any more
    refused_cond = run_creation_condition(creation, next_try(creation, grace, grace_cap))
    if refused_cond is not None:
        decision = replace(decision, conditions=(*decision.conditions, refused_cond))
    status = compute_status(layer, decision, validation.ready, runs, now, review)
    status["runCreation"] = creation.to_status()
    if creation.failures:
        status["lastResult"] = run_creation_result(creation, api_message_of(creation))
    due, status["notified"] = notifications_due(
        layer.get("status") or {}, status, layer["metadata"].get("annotations") or {}, namespace, name, now,
        layer_link(ctx.settings.public_url, namespace, name))
    layer = await _write_status(ctx, layer, status, validation.ready)
    ctx.notifications.send(ctx.kube, layer, due)
    if any(n.event == "DriftResolved" for n in due):
        # Told once per drift, however it ended: an approved correction, or a new commit's apply (§5.9, §5.10).
        await post_event(ctx.kube, layer, "Normal", "DriftResolved", "the layer is in sync again")
    if review is not None:
        for type_, reason, message in review.events:
            await post_event(ctx.kube, layer, type_, reason, message)
        if review.retry_in is not None:
            ctx.wake_layer(key, review.retry_in)
    if decision.remove_finalizer:
        outcome = next((c for c in decision.conditions if c.type == "HasDestroyFailed"), None)
        if outcome is not None:
            # Skipped is a Warning: the resources outlive the layer, and someone may have to clean them up.
            if outcome.reason == DESTROY_SKIPPED:
                await post_event(ctx.kube, layer, "Warning", outcome.reason, outcome.message)
            else:
                await post_event(ctx.kube, layer, "Normal", outcome.reason, outcome.message)
        await set_destroy_finalizer(ctx, layer, present=False)
        return
    await sync_outputs(ctx, key)  # after a successful apply only: see outputs.py
    _schedule_drift_check(ctx, key, layer, now)
    if decision.wake_at is not None:
        # Held back by a sync window: decide again when it may have changed.
        ctx.wake_layer(key, max((decision.wake_at - now).total_seconds(), 0.0) + 1.0)


async def _execute_create(
    ctx: Context,
    layer: Body,
    decision: LayerDecision,
    create: CreateRun,
    validation: LayerValidation,
    runs: Sequence[Body],
    now: datetime,
    review: Review | None,
    deps: DependencyVerdict | None,
) -> Body | None:
    """Carry out a decision to create a run: show the state, create (or adopt) the run, announce it, consume
    the annotations it acted on. The layer as now stored; None when there is nothing more to do now."""
    namespace, name = layer["metadata"]["namespace"], layer["metadata"]["name"]
    if (layer.get("status") or {}).get("state") != decision.state:
        # Show the decision before acting on it: the layer is Running right after, and PlanNeeded or
        # ApplyNeeded would otherwise never be visible (one status write per run created, none at rest).
        layer = await _write_status(
            ctx, layer, compute_status(layer, decision, validation.ready, runs, now, review), validation.ready
        )
    created = await _create_run(ctx, layer, create, runs, deps)
    if created is None:
        return None
    ctx.inventory.runs.observe(created)
    ctx.wake_run((namespace, created["metadata"]["name"]))
    log.info(
        "layer %s/%s: created %s run %s at %s",
        namespace,
        name,
        create.action,
        created["metadata"]["name"],
        create.revision,
    )
    await post_event(
        ctx.kube,
        layer,
        "Normal",
        "RunCreated",
        f"created {create.action} run {created['metadata']['name']} "
        f"for revision {create.revision}",
    )
    # Both are consumed by the run just created: another immediate plan needs a new sync-now, and another
    # apply a new approval, even of a plan with the same sum.
    consumed = {ann.SYNC_NOW: decision.remove_sync_now, ann.APPROVE_PLAN: decision.remove_approval,
                ann.OVERRIDE_POLICY: decision.remove_approval and ann.OVERRIDE_POLICY in (
                    layer["metadata"].get("annotations") or {})}
    if any(consumed.values()):
        patched = await ctx.kube.merge_patch(
            crd_path("terraformlayers", namespace, name),
            {"metadata": {"annotations": {k: None for k, acted in consumed.items() if acted}}},
        )
        ctx.inventory.layers.observe(patched)
        layer = patched
    return layer


async def _create_run(ctx: Context, layer: Body, create: CreateRun, runs: Sequence[Body],
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
    if all(status.get(k) == old_status.get(k) for k in STATUS_KEYS):
        return layer
    meta = layer["metadata"]
    patch = {"status": {k: status.get(k) for k in STATUS_KEYS}}
    old_pending, new_pending = old_status.get("pendingPlan"), status.get("pendingPlan")
    if isinstance(old_pending, dict) and isinstance(new_pending, dict):
        # A merge patch keeps the keys it does not name: a `reason` the plan no longer has must be removed.
        patch["status"]["pendingPlan"] = {**{k: None for k in old_pending if k not in new_pending}, **new_pending}
    updated = await ctx.kube.merge_patch(crd_path("terraformlayers", meta["namespace"], meta["name"], "status"), patch)
    ctx.inventory.layers.observe(updated)
    await _announce(ctx, layer, old_status, status, ready)
    return updated


def _branch_synced(repository: Mapping[str, Any], layer: Mapping[str, Any]) -> bool:
    branch = (layer.get("spec") or {}).get("branch")
    return any(b.get("name") == branch for b in (repository.get("status") or {}).get("branches") or ())


def _repository_key(layer: Mapping[str, Any]) -> Key:
    ref = (layer.get("spec") or {}).get("repository") or {}
    return ref.get("namespace") or layer["metadata"]["namespace"], ref.get("name", "")


async def _announce(ctx: Context, layer: Body, old: Mapping[str, Any], new: Mapping[str, Any], ready: Cond) -> None:
    """Events on state changes and on newly found problems (not on every reconcile)."""
    old_ready = next((c for c in old.get("conditions") or () if c.get("type") == "Ready"), None)
    if not ready.status and (old_ready is None or old_ready.get("reason") != ready.reason):
        await post_event(ctx.kube, layer, "Warning", ready.reason, ready.message)
    if old.get("state") != new.get("state") and new.get("state"):
        await post_event(ctx.kube, layer, "Normal", "StateChanged", f"{old.get('state') or 'New'} -> {new['state']}")
        # Once per failed run: a layer whose failed apply holds back its drift plans comes back to this state at
        # every drift check (issue 25), and the failure was already told.
        if new.get("state") == "MaxRetriesReached" and _exhausted_runs(new) != _exhausted_runs(old):
            await post_event(ctx.kube, layer, "Warning", "MaxRetriesReached", str(new.get("lastResult") or ""))
    for type_, problem in (("IsPlanApproved", "ApprovalMismatch"), ("HasDestroyFailed", "DestroyFailed"),
                           (ARTIFACT_CONDITION, ARTIFACT_REFUSED), ("HasDestroyFailed", DESTROY_PLAN_REFUSED)):
        now_cond = _condition(new, type_)
        if now_cond.get("reason") == problem and _condition(old, type_).get("message") != now_cond.get("message"):
            await post_event(ctx.kube, layer, "Warning", problem, str(now_cond.get("message") or ""))


def _exhausted_runs(status: Mapping[str, Any]) -> tuple[str | None, str | None]:
    return ((status.get("exhaustedPlan") or {}).get("run"), (status.get("exhaustedApply") or {}).get("run"))


def _condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    return next((c for c in status.get("conditions") or () if c.get("type") == type_), {})


def _schedule_drift_check(ctx: Context, key: Key, layer: Mapping[str, Any], now: datetime) -> None:
    plan_date = parse_time((layer["metadata"].get("annotations") or {}).get(ann.PLAN_DATE))
    if plan_date is not None:
        due = drift_due(plan_date, ctx.settings.drift_detection_period, drift_key(layer)) - now
        ctx.wake_layer(key, max(due.total_seconds(), 0.0) + 1.0)
