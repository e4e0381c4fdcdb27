"""One TerraformLayer reconcile's decision (pure; docs/architecture.md §5): from the snapshot reconcile.py gathers
(`LayerFacts`) to what it must do (`LayerActions`), in the order it does it:

1. the destroy finalizer, added or removed before anything else (a layer that might apply something holds it);
2. the run to create, or why none is created now: the state machine (decide.py, or destroy.py once the layer is
   being deleted), held back by the backoff of a refused create (run_creation.py);
3. the rest (`Settlement`): old runs to delete, the skip-destroy mark, the status and the events its change
   calls for, notifications due, the events of the plan review, the finalizer's release, the outputs to sync and
   when to wake the layer again.

`decide_reconcile` makes all three from one snapshot; `settle` makes the third alone, for the reconcile that
creates a run or is refused one (the status then shows the layer as the create left it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.api.annotations import parse_plan_run
from burrito_py.api.common import SyncWindow
from burrito_py.api.effective import state_location
from burrito_py.api.operations import BadOperation, operation_digest, parse_request
from burrito_py.controllers.layer.artifact_check import LayerIdentity
from burrito_py.controllers.layer.decide import CreateRun, LayerDecision, LayerSnapshot, OperationAsk, decide_layer
from burrito_py.controllers.layer.dependency_decisions import DependencySnapshot, DependencyVerdict, judge_dependencies
from burrito_py.controllers.layer.destroy import (
    DESTROY_FINALIZER,
    DESTROY_SKIPPED,
    DestroySnapshot,
    FinalizerChange,
    decide_destroy,
    finalizer_change,
)
from burrito_py.controllers.layer.drift import drift_due
from burrito_py.controllers.layer.notifications import layer_link, notifications_due
from burrito_py.controllers.layer.outputs import OutputsReading, OutputsSync, outputs_sync
from burrito_py.controllers.layer.plan_review import Review, gate_of
from burrito_py.controllers.layer.pull_request_lock import hold_for_pull_request
from burrito_py.controllers.layer.reviewed import MergedReview
from burrito_py.controllers.layer.run_creation import RunCreation, api_message_of, next_try, wait_before_creating
from burrito_py.controllers.layer.run_creation import condition as run_creation_condition
from burrito_py.controllers.layer.run_creation import last_result as run_creation_result
from burrito_py.controllers.layer.run_view import RunView, run_view
from burrito_py.controllers.layer.runs import runs_to_delete
from burrito_py.controllers.layer.status import Event, compute_status, exhaustion_record
from burrito_py.controllers.layer.sync_windows import Window
from burrito_py.controllers.layer.validation import LayerValidation
from burrito_py.kube.conditions import Cond
from burrito_py.kube.inventory import Body, Key
from burrito_py.notify.message import Notification
from burrito_py.timeutil import parse_time


@dataclass(frozen=True, slots=True)
class LayerFacts:
    """What one reconcile knows of a layer, gathered once (reconcile.py); nothing is read while deciding."""

    layer: Body
    repository: Body | None
    validation: LayerValidation
    runs: tuple[Body, ...]  # the layer's runs, newest first
    now: datetime
    drift_period: timedelta
    grace: timedelta  # the backoff of a refused run create: failure_grace_period and its cap
    grace_cap: timedelta
    public_url: str = ""  # for the links in notifications
    withdrawn: str | None = None  # a deleted layer's CRD (or owner's) is being deleted: crd_guard.py
    windows: tuple[Window, ...] = ()
    review: Review | None = None  # this reconcile's review of the current plan (None while deleting)
    dependencies: DependencySnapshot | None = None  # its upstreams (None without spec.dependsOn)
    dependents: tuple[str, ...] = ()  # the layers that depend on it and exist (while deleting)
    named_plan_run: Body | None = None  # the run of its namespace `plan-run` names, for the artifact check
    creation: RunCreation = field(default_factory=RunCreation)  # a refused run create (status.runCreation)
    outputs: OutputsReading | None = None  # the last apply's outputs, when the status or Secret lags them
    # The layer was just read fresh because the decision on the inventory's copy asked for a run that its backoff
    # allowed: the run this snapshot asks for is created without checking the backoff again (as it always was).
    backoff_checked: bool = False
    # Merged pull requests that changed the layer since its last apply (reviewed.py), with their tree comparison.
    merged: tuple[MergedReview, ...] = ()
    # The open pull request that applied its plan before merge and holds the layer (pull_request_lock.py).
    locked_by: str | None = None

    @property
    def key(self) -> Key:
        return self.layer["metadata"]["namespace"], self.layer["metadata"]["name"]


@dataclass(frozen=True, slots=True)
class Settlement:
    """What a reconcile does once its run is created (or none is): see the module's docstring, step 3."""

    delete_runs: tuple[str, ...]  # names of old runs beyond runsHistoryLimit
    skip_destroy: str | None  # annotate skip-destroy with this reason (and say so)
    status: Body  # written when it differs from the stored one, with its `announcements`
    ready: Cond
    notifications: tuple[Notification, ...]  # recorded in status.notified, sent after the write
    events: tuple[Event, ...]  # after the write: DriftResolved, the plan review's
    retry_review_in: float | None  # an unreadable plan is reviewed again
    release: Event | None  # the destroy's outcome, told before the finalizer goes (release_finalizer)
    release_finalizer: bool  # the destroy is done or not wanted: remove the finalizer and stop
    outputs: OutputsSync | None  # bring status.outputs and the outputs Secret up to the last apply (outputs.py)
    drift_check_in: float | None  # seconds until the current plan is stale (drift.py)
    wake_in: float | None  # a sync window holds back the run: decide again then
    # An operation request whose run exists already (its removal after the create was lost): removed now, each
    # annotation only if it still holds the value decided on (key, value).
    remove_annotations: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class LayerActions:
    decision: LayerDecision
    settlement: Settlement
    finalizer: FinalizerChange | None = None  # first of all
    create: CreateRun | None = None  # after one fresh read of the layer (reconcile.py)
    hold_for: timedelta | None = None  # a refused create of this same run: not before its backoff
    wake_repository: Key | None = None  # a branch the repository has not resolved yet: now, not at its next poll
    dependencies: DependencyVerdict | None = None  # the upstream outputs a created run is given


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
    merged: tuple[MergedReview, ...] = (),
    state_managed: bool = False,
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
        merged=merged,
        operation=operation_ask(annotations, views),
        state_location=state_location(annotations.get(ann.STATE_LOCATION), state_managed),
        state_migrated=annotations.get(ann.STATE_LOCATION) in ("managed", "code"),
        spec_managed=state_managed,
    )


def operation_ask(annotations: Mapping[str, str], views: Sequence[RunView]) -> OperationAsk | None:
    """The day-2 operation the layer's annotations ask for (§5.12), checked; None without one."""
    if ann.OPERATION not in annotations:
        return None
    value, by = annotations.get(ann.OPERATION), annotations.get(ann.OPERATION_BY)
    digest = operation_digest(value, by)
    try:
        kind, operation = parse_request(value, by)
    except BadOperation as exc:
        return OperationAsk("", None, digest, refusal=str(exc))
    done = next((v.name for v in views if v.operation_digest == digest), None)
    return OperationAsk(kind, operation, digest, done_by=done)


def identity(layer: Mapping[str, Any]) -> LayerIdentity:
    meta = layer["metadata"]
    return LayerIdentity(str(meta.get("uid") or ""), str(meta.get("namespace") or ""), str(meta["name"]))


def drift_key(layer: Mapping[str, Any]) -> str:
    meta = layer["metadata"]
    return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta['name']}")


def decide(
    layer: Mapping[str, Any], runs: Sequence[Mapping[str, Any]], validation: LayerValidation, drift: timedelta,
    now: datetime, withdrawn: str | None = None, windows: tuple[Window, ...] = (), review: Review | None = None,
    dependencies: DependencyVerdict | None = None, dependents: tuple[str, ...] = (),
    plan_run: Mapping[str, Any] | None = None, merged: tuple[MergedReview, ...] = (),
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
                                 validation.drift_remediation, dependencies, plan_run, merged,
                                 validation.state_managed), now)


def decide_reconcile(facts: LayerFacts) -> LayerActions:
    """The whole of one reconcile's decision: see the module's docstring."""
    layer, validation = facts.layer, facts.validation
    meta = layer["metadata"]
    finalizer = finalizer_change(validation.destroy_on_deletion, meta.get("finalizers") or (),
                                 bool(meta.get("deletionTimestamp")))
    deps = judge_dependencies(facts.dependencies) if facts.dependencies is not None else None
    decision = decide(layer, facts.runs, validation, facts.drift_period, facts.now, facts.withdrawn, facts.windows,
                      facts.review, deps, facts.dependents, facts.named_plan_run, facts.merged)
    if not meta.get("deletionTimestamp"):
        decision = hold_for_pull_request(decision, facts.locked_by)
    create, hold_for = None, None
    if validation.ready.status and decision.create_run is not None:
        # A run the API refused to create is asked for again only after its backoff (run_creation.py).
        if not facts.backoff_checked:
            hold_for = wait_before_creating(facts.creation, decision.create_run.action, decision.create_run.revision,
                                            facts.now, facts.grace, facts.grace_cap)
        if hold_for is None:
            create = decision.create_run
    repository = facts.repository
    wake_repository = None
    if create is None and decision.state is None and repository is not None and not branch_synced(repository, layer):
        wake_repository = repository_key(layer)
    return LayerActions(decision, settle(facts, decision), finalizer, create, hold_for, wake_repository, deps)


def settle(facts: LayerFacts, decision: LayerDecision) -> Settlement:
    """Step 3 for `decision` on `facts`: its status, old runs, events, notifications and wakes."""
    layer, now = facts.layer, facts.now
    meta = layer["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    keep = facts.validation.runs_to_keep
    doomed = tuple(run["metadata"]["name"] for run in runs_to_delete(facts.runs, keep, annotations))
    runs = [run for run in facts.runs if run["metadata"]["name"] not in doomed]
    creation = facts.creation
    if creation.failures and decision.create_run is None and decision.state not in ("PlanNeeded", "ApplyNeeded"):
        creation = RunCreation()  # the layer no longer wants a run: nothing is refused any more
    refused_cond = run_creation_condition(creation, next_try(creation, facts.grace, facts.grace_cap))
    if refused_cond is not None:
        decision = replace(decision, conditions=(*decision.conditions, refused_cond))
    ready = facts.validation.ready
    status = compute_status(layer, decision, ready, runs, now, facts.review)
    status["runCreation"] = creation.to_status()
    if creation.failures:
        status["lastResult"] = run_creation_result(creation, api_message_of(creation))
    due, status["notified"] = notifications_due(layer.get("status") or {}, status, annotations, namespace, name, now,
                                                layer_link(facts.public_url, namespace, name))
    events: list[Event] = []
    if any(n.event == "DriftResolved" for n in due):
        # Told once per drift, however it ended: an approved correction, or a new commit's apply (§5.9, §5.10).
        events.append(("Normal", "DriftResolved", "the layer is in sync again"))
    review = facts.review
    if review is not None:
        events += review.events
    release: Event | None = None
    if decision.remove_finalizer:
        outcome = next((c for c in decision.conditions if c.type == "HasDestroyFailed"), None)
        if outcome is not None:
            # Skipped is a Warning: the resources outlive the layer, and someone may have to clean them up.
            skipped = outcome.reason == DESTROY_SKIPPED
            release = ("Warning", outcome.reason, outcome.message) if skipped else ("Normal", outcome.reason,
                                                                                   outcome.message)
    return Settlement(
        delete_runs=doomed,
        skip_destroy=decision.skip_destroy,
        status=status,
        ready=ready,
        notifications=tuple(due),
        events=tuple(events),
        retry_review_in=review.retry_in if review is not None else None,
        release=release,
        release_finalizer=decision.remove_finalizer,
        # After a successful apply only (outputs.py); never for a layer being deleted.
        outputs=outputs_sync(layer, facts.outputs) if facts.outputs is not None and not decision.remove_finalizer
        else None,
        drift_check_in=drift_check_in(layer, facts.drift_period, now),
        # Held back by a sync window: decide again when it may have changed.
        wake_in=max((decision.wake_at - now).total_seconds(), 0.0) + 1.0 if decision.wake_at is not None else None,
        remove_annotations=tuple((k, annotations[k]) for k in (ann.OPERATION, ann.OPERATION_BY) if k in annotations)
        if decision.remove_operation and decision.create_run is None else (),
    )


def drift_check_in(layer: Mapping[str, Any], period: timedelta, now: datetime) -> float | None:
    """Seconds until the layer's plan is stale (one wake per drift period on its own beat), None without a plan."""
    plan_date = parse_time((layer["metadata"].get("annotations") or {}).get(ann.PLAN_DATE))
    if plan_date is None:
        return None
    return max((drift_due(plan_date, period, drift_key(layer)) - now).total_seconds(), 0.0) + 1.0


def branch_synced(repository: Mapping[str, Any], layer: Mapping[str, Any]) -> bool:
    branch = (layer.get("spec") or {}).get("branch")
    return any(b.get("name") == branch for b in (repository.get("status") or {}).get("branches") or ())


def repository_key(layer: Mapping[str, Any]) -> Key:
    ref = (layer.get("spec") or {}).get("repository") or {}
    return ref.get("namespace") or layer["metadata"]["namespace"], ref.get("name", "")


def holds_finalizer(layer: Mapping[str, Any]) -> bool:
    return DESTROY_FINALIZER in (layer["metadata"].get("finalizers") or ())
