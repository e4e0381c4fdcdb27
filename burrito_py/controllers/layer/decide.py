"""What a TerraformLayer needs next (docs/architecture.md §5): conditions and state as pure functions.

The snapshot is built from the layer's annotations and the runs the controller already holds in
memory, so evaluating a layer (on every event and every drift tick) costs no API or datastore call.

Approval (`spec.approvePlan`): `auto` applies every plan that has changes, as `autoApply` always did;
`manual` applies only the plan whose sum the layer's `api.burrito-py.io/approve-plan` annotation names
exactly. The approval is consumed (the controller removes the annotation) when the apply run is created,
as `sync-now` is, so a later plan, even one with the same sum, needs a fresh approval; an approval naming
any other sum applies nothing and stays where the person put it, reported by the `IsPlanApproved`
condition. A newer plan (new commit, drift, sync-now) has another sum, so an older approval never applies it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import get_args

from burrito_py.api import annotations as ann
from burrito_py.api.annotations import parse_plan_run
from burrito_py.api.common import RunKind
from burrito_py.api.layer import LayerState
from burrito_py.api.operations import STATE_ACTIONS, RunOperation, describe
from burrito_py.controllers.layer.artifact_check import CONDITION as ARTIFACT_CONDITION
from burrito_py.controllers.layer.artifact_check import REFUSED as ARTIFACT_REFUSED
from burrito_py.controllers.layer.artifact_check import LayerIdentity, artifact_refusal
from burrito_py.controllers.layer.dependency_decisions import DependencyVerdict
from burrito_py.controllers.layer.drift import drift_due
from burrito_py.controllers.layer.plan_gate import PlanGate, drift_condition, gate_plan
from burrito_py.controllers.layer.reviewed import MergedReview, ReviewedVerdict, judge_merged
from burrito_py.controllers.layer.run_view import RunView
from burrito_py.controllers.layer.sync_windows import Window, sync_windows_allow
from burrito_py.controllers.run.decide import STALE_PLAN, TIMED_OUT, TIMED_OUT_SAYS
from burrito_py.kube.conditions import Cond
from burrito_py.timeutil import parse_time

NO_CHANGES = "No changes."
RETRY_LIMIT = "RetryLimitReached"
# A stale apply re-plans at once this many times in a row at one relevant commit; after that the apply of the
# latest plan is exhausted until a plan with another sum (drift, sync-now, a new commit), so a layer whose
# state keeps changing under it cannot loop plan → stale apply → plan.
MAX_STALE_REPLANS = 1


@dataclass(frozen=True, slots=True)
class Exhaustion:
    """A run that failed for good (`status.exhaustedPlan` / `status.exhaustedApply`), see `ExhaustedRun`."""

    run: str
    key: str
    reason: str = RETRY_LIMIT
    message: str = ""
    relevant_commit: str | None = None
    stale_count: int = 0
    # For an apply: what its plan would change and the upstream outputs it was given (see `repeats_failed_apply`).
    changes_digest: str | None = None
    inputs_digest: str | None = None


@dataclass(frozen=True, slots=True)
class OperationAsk:
    """A day-2 operation asked of the layer (`api.burrito-py.io/operation`, api/operations.py), as read."""

    kind: str  # import | state-rm | state-mv | plan | force-unlock; "" when refused
    operation: RunOperation | None
    digest: str  # operation_digest of the annotations: the stamp of the run made for it
    refusal: str | None = None  # why it is not run (the field and the reason)
    # A run of the layer already made for this very request (the annotation's removal after its create was lost).
    done_by: str | None = None


@dataclass(frozen=True, slots=True)
class LayerSnapshot:
    annotations: dict[str, str]
    last_run: RunView | None
    last_plan_run: RunView | None
    last_apply_run: RunView | None
    auto_apply: bool
    drift_period: timedelta
    # Any run of the layer not yet terminal, whatever the order: a layer never gets a second live run.
    active_run: RunView | None = None
    # The run named by `plan-run` (the run holding the current plan), when the controller holds it.
    plan_run: RunView | None = None
    # What the status recorded at the previous reconcile (the runs themselves may since have been deleted).
    exhausted_plan: Exhaustion | None = None
    exhausted_apply: Exhaustion | None = None
    # The repository's sync windows and the controller's defaults, and the layer's name they match.
    windows: tuple[Window, ...] = ()
    layer_name: str = ""
    # What places the layer's drift checks on its own beat (drift.py): its UID.
    drift_key: str = ""
    # The controllers' review of the current plan (policy verdict, drift state; plan_gate.py), None before it.
    gate: PlanGate | None = None
    # The effective remediationStrategy.drift: detect | auto | autoIfPolicyPasses.
    drift_remediation: str = "detect"
    # How the layer's upstreams stand (dependency_decisions.py), None without spec.dependsOn.
    dependencies: DependencyVerdict | None = None
    # The inputs digest the current plan was made with (its run's stamp, else status.inputsDigest).
    plan_inputs_digest: str | None = None
    # The layer itself and the run of the layer's namespace that `plan-run` names, whatever it is (artifact check).
    identity: LayerIdentity | None = None
    named_plan_run: RunView | None = None
    # Merged pull requests that changed the layer, with what their review says (reviewed.py; issue 30 item 4).
    merged: tuple[MergedReview, ...] = ()
    # A day-2 operation asked of the layer (§5.12), None without the annotation.
    operation: OperationAsk | None = None
    # Where the layer's state lives (api/effective.py `state_location`): `managed` or `code`, and whether a
    # migrate-state run put it there (`runner.burrito-py.io/state-location`) rather than the spec alone.
    state_location: str = "code"
    state_migrated: bool = False
    spec_managed: bool = False


@dataclass(frozen=True, slots=True)
class CreateRun:
    action: RunKind
    revision: str
    artifact_run: str | None = None
    artifact_attempt: int | None = None
    destroy: bool = False
    # Stamped on the run (see RunView): the relevant commit at creation, and for an apply the plan's sum.
    relevant_commit: str | None = None
    plan_sum: str | None = None
    # The digest of the upstream outputs handed to its runner (dependencies), None: none.
    inputs_digest: str | None = None
    # Stamped on an apply: the digest of its plan's changes (the review's); on a plan: asked by `sync-now`.
    changes_digest: str | None = None
    sync_requested: bool = False
    # A day-2 operation's run (§5.12): what it does and who asked, and the request's digest it is stamped with.
    operation: RunOperation | None = None
    operation_digest: str | None = None


@dataclass(frozen=True, slots=True)
class PendingPlanView:
    """The plan waiting for a manual approval (`status.pendingPlan`)."""

    sum: str
    run: str | None
    revision: str | None
    # Why a person must act on an `auto` layer's plan (a policy gate, a drift correction); empty under manual.
    reason: str = ""


@dataclass(frozen=True, slots=True)
class LayerDecision:
    state: LayerState | None
    conditions: tuple[Cond, ...]
    create_run: CreateRun | None
    remove_sync_now: bool
    pending_plan: PendingPlanView | None = None
    # The approve-plan annotation (and a policy override) was acted on (an apply run of the approved plan is
    # created): remove them.
    remove_approval: bool = False
    # The layer is being deleted and its destroy is done (or not wanted): let it go.
    remove_finalizer: bool = False
    # Annotate the layer `api.burrito-py.io/skip-destroy` with this reason (a CRD's deletion is behind the
    # layer's, and a live run is waited for first: the mark keeps the verdict until then).
    skip_destroy: str | None = None
    # What to record as `status.exhaustedPlan` / `status.exhaustedApply`.
    exhausted_plan: Exhaustion | None = None
    exhausted_apply: Exhaustion | None = None
    # A sync window holds back the run this decision would create: wake the layer when it may change.
    wake_at: datetime | None = None
    # `status.appliedRevision`: the branch commit whose code is planned and applied (only while Idle).
    applied_revision: str | None = None
    # `status.dependencies` and `status.inputsDigest` (None without dependencies).
    dependencies: DependencyVerdict | None = None
    inputs_digest: str | None = None
    # What a merged pull request means for the current plan (`status.reviewedPlan`), None: nothing.
    reviewed: ReviewedVerdict | None = None
    # The operation request was acted on (its run is created, or exists already): remove its annotations.
    remove_operation: bool = False


def plan_exhaustion(snap: LayerSnapshot) -> Exhaustion | None:
    """The newest plan run, if it failed for good. Without a plan run in hand (history cleanup deleted it),
    the status's record stands; a newer plan run always replaces it."""
    run = snap.last_plan_run
    if run is None or not run.terminal:
        return snap.exhausted_plan
    if not run.failed:
        return None
    # Keyed on the relevant commit it planned: an unrelated commit must not retry a broken layer.
    key = run.relevant_commit or run.revision or ""
    return Exhaustion(run.name, key, TIMED_OUT if run.reason == TIMED_OUT else RETRY_LIMIT, run.message,
                      run.relevant_commit)


def apply_exhaustion(snap: LayerSnapshot) -> Exhaustion | None:
    """The newest apply run, if it failed for good or on a stale plan; else the status's record."""
    run = snap.last_apply_run
    previous = snap.exhausted_apply
    if run is None or not run.terminal:
        return previous
    if not run.failed:
        return None
    if previous is not None and previous.run == run.name:
        return previous  # already recorded (with its stale count)
    current = parse_plan_run(snap.annotations.get(ann.PLAN_RUN))
    # Keyed on the sum of the plan it applied; runs made before the sum was stamped: by their artifact.
    key = run.plan_sum or (
        snap.annotations.get(ann.PLAN_SUM, "") if current is not None and run.artifact == current[0] else ""
    )
    reason = run.reason if run.reason in (STALE_PLAN, TIMED_OUT) else RETRY_LIMIT
    stale_count = 0
    if reason == STALE_PLAN:
        streak = (
            previous is not None
            and previous.reason == STALE_PLAN
            and previous.relevant_commit == run.relevant_commit
        )
        stale_count = (previous.stale_count if previous is not None and streak else 0) + 1
    return Exhaustion(run.name, key, reason, run.message, run.relevant_commit, stale_count, run.changes_digest,
                      run.inputs_digest)


def repeats_failed_apply(snap: LayerSnapshot, failed: Exhaustion | None, plan_sum: str | None,
                         relevant_commit: str | None) -> bool:
    """Whether the current plan, another sum than the one whose apply failed for good, would make the very same
    changes again, with nothing new behind it: the same relevant commit, the same upstream inputs, a changes
    digest equal to the failed apply's (the review's, plans/changes.py), and nobody asking (no `sync-now` plan, no
    approval of this sum). Every drift check makes a new plan, hence a new sum: without this, an apply that always
    fails would be applied again once per drift period, forever (issue 25). Unknown facts (a record or a review
    without a digest) never hold a plan back."""
    if failed is None or plan_sum is None or failed.key == plan_sum:
        return False
    if failed.reason == STALE_PLAN and failed.stale_count <= MAX_STALE_REPLANS:
        return False  # a stale apply's one re-plan at once (§5.1) is the retry of that apply
    gate = snap.gate
    if gate is None or gate.plan_sum != plan_sum or not gate.changes_digest or not failed.changes_digest:
        return False
    if gate.changes_digest != failed.changes_digest:
        return False
    if not failed.relevant_commit or failed.relevant_commit != relevant_commit:
        return False
    if failed.inputs_digest != snap.plan_inputs_digest:
        return False
    if snap.annotations.get(ann.APPROVE_PLAN) == plan_sum:
        return False
    return not (snap.plan_run is not None and snap.plan_run.sync_requested)


def decide_layer(snap: LayerSnapshot, now: datetime) -> LayerDecision:
    a = snap.annotations
    branch_commit = a.get(ann.BRANCH_COMMIT)
    # An empty annotation means "no plan", as it does for the status (compute_status).
    plan_sum = a.get(ann.PLAN_SUM) or None
    plan_commit = a.get(ann.PLAN_COMMIT) or None
    plan_date = parse_time(a.get(ann.PLAN_DATE))
    relevant_commit = a.get(ann.RELEVANT_COMMIT) or branch_commit

    if not branch_commit:
        waiting = Cond(
            "HasBranchCommit",
            False,
            "WaitingForRepository",
            "the repository controller has not resolved this layer's branch yet",
        )
        return LayerDecision(None, (waiting,), None, remove_sync_now=False)

    last = snap.last_run
    live = snap.active_run or (last if last is not None and not last.terminal else None)
    running = live is not None
    is_running = Cond(
        "IsRunning",
        running,
        "RunInProgress" if running else "NoRunInProgress",
        f"run {live.name} is {live.state or 'starting'}" if live is not None else "",
    )

    plan_fresh = (
        plan_sum is not None and plan_date is not None and now < drift_due(plan_date, snap.drift_period, snap.drift_key)
    )

    # Decided on revisions, never on dates: the plan is of the relevant commit when it planned that commit or
    # the branch head, or was made at a commit whose relevant commit (stamped on its run) is the current one.
    plan_run_relevant = snap.plan_run.relevant_commit if snap.plan_run is not None else None
    planned = plan_sum is not None and (
        (plan_commit is not None and plan_commit in (relevant_commit, branch_commit))
        or (plan_run_relevant is not None and plan_run_relevant == relevant_commit)
    )
    # With dependencies, a plan is of the current inputs only when made with the current consumed outputs: a
    # consumed output that changed (or, with triggerAlways, an upstream apply) is planned again, once.
    deps = snap.dependencies
    wanted_inputs = deps.inputs_digest if deps is not None else None
    inputs_changed = planned and wanted_inputs is not None and snap.plan_inputs_digest != wanted_inputs
    planned = planned and not inputs_changed
    relevant_planned = Cond(
        "IsLastRelevantCommitPlanned",
        planned,
        "LastRelevantCommitPlanned" if planned else ("InputsChanged" if inputs_changed else "NewRelevantCommit"),
        "" if planned else ("the upstream outputs it reads changed since its plan" if inputs_changed
                            else f"commit {relevant_commit} has not been planned"),
    )

    failed_plan = plan_exhaustion(snap)
    failed_apply = apply_exhaustion(snap)
    plan_failed = plan_sum is None or failed_plan is not None
    last_plan_failed = Cond(
        "HasLastPlanFailed",
        plan_failed,
        "LastPlanFailed" if failed_plan is not None else ("NoPlanYet" if plan_sum is None else "LastPlanSucceeded"),
        failed_plan.message if failed_plan is not None else "",
    )

    no_changes = a.get(ann.PLAN_SUMMARY) == NO_CHANGES
    apply_done = plan_sum is None or a.get(ann.APPLY_SUM) == plan_sum or no_changes
    # A day-2 operation outdates the plan (§5.12): an import, state rm or state mv changed the state it was made
    # against, and a `-target` plan covers part of the code only, so once applied (or found to change nothing) the
    # layer plans whole again.
    outdated_by = ""
    if last is not None and last.action in STATE_ACTIONS and last.state == "Succeeded":
        outdated_by = f"run {last.name} changed the state ({last.operation or last.action})"
    elif snap.plan_run is not None and snap.plan_run.targeted and apply_done and not running:
        outdated_by = f"the plan of run {snap.plan_run.name} was a -target plan"
    plan_up_to_date = Cond(
        "IsPlanArtifactUpToDate",
        plan_fresh and not outdated_by,
        "PlanIsRecent" if plan_fresh and not outdated_by else (
            "NoPlanYet" if plan_sum is None else ("OperationChangedState" if outdated_by else "DriftDetectionDue")),
        outdated_by,
    )
    plan_fresh = plan_fresh and not outdated_by
    apply_up_to_date = Cond(
        "IsApplyUpToDate",
        apply_done,
        "NothingToApply" if plan_sum is None or no_changes else ("PlanApplied" if apply_done else "PlanNotApplied"),
    )

    sync_now = ann.SYNC_NOW in a
    sync_scheduled = Cond("IsSyncScheduled", sync_now, "SyncNowRequested" if sync_now else "NoSyncRequested")

    plan_exhausted = failed_plan is not None and failed_plan.key in (relevant_commit, branch_commit)
    # The apply of the current plan failed: for good, or on a stale plan (re-planned at once, within bounds).
    apply_of_plan_failed = failed_apply is not None and plan_sum is not None and failed_apply.key == plan_sum
    stale_replan = (
        apply_of_plan_failed
        and failed_apply is not None
        and failed_apply.reason == STALE_PLAN
        and failed_apply.stale_count <= MAX_STALE_REPLANS
    )
    # A newer plan that would make the same changes as the failed apply, with nothing new behind it, is not
    # applied either (issue 25): an always-failing apply is applied once, with its retries, not once per drift check.
    repeated = repeats_failed_apply(snap, failed_apply, plan_sum, relevant_commit)
    apply_exhausted = (apply_of_plan_failed and not stale_replan) or repeated
    exhausted_run = failed_plan if plan_exhausted else (failed_apply if apply_exhausted else None)
    retry_message = ""
    if exhausted_run is not None:
        how = TIMED_OUT_SAYS if exhausted_run.reason == TIMED_OUT else "failed after its last retry"
        retry_message = f"run {exhausted_run.run} {how}: {exhausted_run.message}".rstrip(": ")
    if repeated and not plan_exhausted:
        retry_message += (f"; plan {plan_sum} would make the same changes, so it is not applied until a new relevant "
                          f"commit, changed inputs, {ann.SYNC_NOW} or an approval "
                          f"({ann.APPROVE_PLAN}={plan_sum})")
    retry_limit = Cond(
        "HasLastRunReachedRetryLimit",
        exhausted_run is not None,
        (exhausted_run.reason if exhausted_run is not None else "RetriesAvailable"),
        retry_message,
    )

    # The plan an apply would take must be one the controllers made and recorded (artifact_check.py); one that is
    # not is never applied, and the layer plans again. Not the live run's own plan: its result is being recorded
    # (the run controller annotates the layer just before it marks the run Succeeded).
    named = parse_plan_run(a.get(ann.PLAN_RUN))
    recording = live is not None and named is not None and named[0] == live.name
    refusal = None
    if (plan_sum is not None and not (apply_done or plan_failed or apply_exhausted) and not recording
            and snap.identity is not None):
        refusal = artifact_refusal(snap.identity, a.get(ann.PLAN_RUN), plan_sum, snap.named_plan_run)
    artifact_cond = (
        Cond(ARTIFACT_CONDITION, False, ARTIFACT_REFUSED,
             f"the plan {a.get(ann.PLAN_RUN)!r} ({plan_sum}) is never applied: {refusal}; the layer plans again")
        if refusal is not None
        else Cond(ARTIFACT_CONDITION, True, "ArtifactVerified" if plan_sum is not None and not apply_done
                  and not running else "NothingToVerify")
    )

    # A day-2 operation (§5.12): run once no run is live, before anything else the layer would do.
    ask = snap.operation
    operation_run: CreateRun | None = None
    operation_cond: Cond | None = None
    if ask is not None:
        if ask.refusal is not None or ask.operation is None:
            operation_cond = Cond("OperationAccepted", False, "InvalidOperation",
                                  f"{ask.refusal}; nothing is run: fix or remove {ann.OPERATION}")
        elif ask.kind == "migrate-state" and ask.done_by is None and ask.operation.to == snap.state_location:
            operation_cond = Cond("OperationAccepted", False, "NothingToMigrate",
                                  f"{describe(ask.kind, ask.operation)}: {_lives_in(snap)} already, nothing to "
                                  f"migrate; nothing is run: remove {ann.OPERATION}")
        elif ask.done_by is not None:
            operation_cond = Cond("OperationAccepted", True, "OperationStarted",
                                  f"{describe(ask.kind, ask.operation)} runs as {ask.done_by}")
        elif live is not None:
            operation_cond = Cond("OperationAccepted", True, "WaitingForRun",
                                  f"{describe(ask.kind, ask.operation)} waits for run {live.name}")
        else:
            operation_cond = Cond("OperationAccepted", True, "OperationStarting",
                                  f"{describe(ask.kind, ask.operation)}, asked by {ask.operation.requested_by}")
            operation_run = CreateRun(
                _run_kind(ask.kind), branch_commit,
                relevant_commit=relevant_commit,
                inputs_digest=wanted_inputs if deps is None or deps.plan_allowed else None,
                operation=ask.operation, operation_digest=ask.digest,
            )

    state: LayerState
    if running:
        state = "Running"
    elif (
        (operation_run is not None and operation_run.action == "plan")  # a -replace/-target plan (§5.12)
        or sync_now
        or ((not plan_fresh or not planned or stale_replan or refusal is not None) and not plan_exhausted)
    ):
        state = "PlanNeeded"
    elif not apply_done and not plan_failed and not apply_exhausted:
        state = "ApplyNeeded"
    elif plan_exhausted or apply_exhausted:
        state = "MaxRetriesReached"
    else:
        state = "Idle"

    # The controllers' review of the plan: an `auto` layer may be held back for a person (policy gate, drift
    # correction), and a mandatory denial holds back even an approval (plan_gate.py).
    gate = gate_plan(snap.gate, plan_sum, snap.drift_remediation)
    # A merged pull request whose reviewed plan this is stands for the approval (reviewed.py): it lifts the wait for
    # a person, never a policy's gate.
    merged = (judge_merged(snap.merged, plan_sum, plan_commit, snap.gate, parse_time(a.get(ann.APPLY_DATE)),
                           plan_date) if snap.merged and planned and not sync_now else None)
    by_review = merged is not None and merged.approved and not snap.auto_apply
    auto = (snap.auto_apply or by_review) and gate.auto_allowed
    reviewed = snap.gate if snap.gate is not None and snap.gate.plan_sum == plan_sum else None
    drifted = drift_condition(reviewed.drift_state if reviewed else None, reviewed.resources if reviewed else 0)

    # Under manual approval (or an `auto` layer held back), the plan an apply would apply, and whether the
    # approval names it. A plan being applied waits for nothing: no pending plan while an apply runs.
    applying = live is not None and live.action == "apply"
    pending: PendingPlanView | None = None
    if (
        not auto
        and plan_sum is not None
        and not (apply_done or plan_failed or apply_exhausted or stale_replan or applying or refusal is not None
                 or recording)
    ):
        reason = gate.waiting_reason if snap.auto_apply or by_review or not gate.approval_allowed else ""
        if not reason and merged is not None and not merged.approved:
            reason = merged.message
        pending = PendingPlanView(plan_sum, a.get(ann.PLAN_RUN), plan_commit, reason)
    approval = a.get(ann.APPROVE_PLAN)
    approved = pending is not None and approval == pending.sum
    approval_cond = _approval_condition(auto, pending, approval, applying)
    if auto and by_review and merged is not None:
        approval_cond = Cond("IsPlanApproved", True, "ReviewedInPullRequest", merged.message)

    create: CreateRun | None = None
    if operation_run is not None:
        create = operation_run
    elif state == "PlanNeeded" and (deps is None or deps.plan_allowed):
        create = CreateRun("plan", branch_commit, relevant_commit=relevant_commit, inputs_digest=wanted_inputs,
                           sync_requested=sync_now)
    elif state == "ApplyNeeded" and (auto or (approved and gate.approval_allowed)) and (
        deps is None or deps.apply_allowed
    ):
        artifact = parse_plan_run(a.get(ann.PLAN_RUN))
        if artifact is not None and plan_commit:
            create = CreateRun(
                "apply", plan_commit, artifact[0], artifact[1], relevant_commit=relevant_commit, plan_sum=plan_sum,
                inputs_digest=wanted_inputs, changes_digest=reviewed.changes_digest if reviewed else None,
            )

    # Sync windows are decided here, before a run exists: a held-back layer keeps its state (PlanNeeded or
    # ApplyNeeded), says why, and is woken when the window changes. It then decides afresh, so a plan that
    # aged past the drift period meanwhile is planned again, never applied.
    window_cond, wake_at = Cond("IsInSyncWindow", True, "NoRunWaiting"), None
    if create is not None:
        # A day-2 operation that changes state is held back as an apply is (it changes what is deployed).
        verdict = sync_windows_allow(snap.windows, "plan" if create.action == "plan" else "apply", snap.layer_name,
                                     now)
        window_cond = Cond("IsInSyncWindow", verdict.allowed, verdict.reason, verdict.message)
        if not verdict.allowed:
            create, wake_at = None, verdict.wake_at

    conditions = (
        is_running,
        plan_up_to_date,
        relevant_planned,
        last_plan_failed,
        apply_up_to_date,
        sync_scheduled,
        retry_limit,
        approval_cond,
        gate.condition,
        drifted,
        artifact_cond,
        window_cond,
        *((deps.condition,) if deps is not None else ()),
        *((operation_cond,) if operation_cond is not None else ()),
        *((_location_condition(snap),) if snap.state_migrated else ()),
    )
    return LayerDecision(
        state,
        conditions,
        create,
        # An operation's plan does not answer a sync-now: that plans the whole layer next.
        remove_sync_now=sync_now and create is not None and create.operation is None,
        pending_plan=pending,
        # Under `auto` an approval of the plan only lifts a repeated failure (above): consumed by the apply too.
        remove_approval=(approved or (approval is not None and approval == plan_sum)) and create is not None
        and create.action == "apply",
        exhausted_plan=failed_plan,
        exhausted_apply=failed_apply,
        wake_at=wake_at,
        applied_revision=branch_commit if state == "Idle" and apply_done else None,
        dependencies=deps,
        inputs_digest=snap.plan_inputs_digest if deps is not None else None,
        reviewed=merged,
        remove_operation=(create is not None and create.operation is not None)
        or (ask is not None and ask.done_by is not None),
    )


def _lives_in(snap: LayerSnapshot) -> str:
    where = ("the layer's state is in the burrito-py datastore" if snap.state_location == "managed"
             else "the layer's state is in the backend its code declares")
    return where + (f" ({ann.STATE_LOCATION})" if snap.state_migrated
                    else f" (spec.state.managed is {'true' if snap.spec_managed else 'false or unset'})")


def _location_condition(snap: LayerSnapshot) -> Cond:
    """`StateLocation`, on a layer whose state a migrate-state run moved: where it is, and whether the spec agrees
    (the record wins: §10.6; a spec that disagrees is reported, never followed)."""
    managed = snap.state_location == "managed"
    message = _lives_in(snap)
    if managed != snap.spec_managed:
        message += (f"; spec.state.managed is {'true' if snap.spec_managed else 'false or unset'}, which is not "
                    f"followed: runs keep using where the migration put the state; set spec.state.managed to "
                    f"{'true' if managed else 'false'} to match, or ask migrate-state to "
                    f"{'code' if managed else 'managed'} to move it")
    return Cond("StateLocation", managed == snap.spec_managed, "Managed" if managed else "CodeBackend", message)


def _run_kind(kind: str) -> RunKind:
    """The run action of an operation kind (a `-replace`/`-target` plan is a plan run)."""
    for action in get_args(RunKind):
        if action == kind:
            return action  # type: ignore[no-any-return]
    raise ValueError(f"{kind!r} is not a run action")


def _approval_condition(auto: bool, pending: PendingPlanView | None, approval: str | None, applying: bool) -> Cond:
    if auto:
        return Cond("IsPlanApproved", True, "AutoApprove", "approvePlan is auto: every plan with changes is applied")
    if pending is None:
        return Cond("IsPlanApproved", True, "ApplyInProgress" if applying else "NothingToApprove", "")
    if approval == pending.sum:
        return Cond("IsPlanApproved", True, "PlanApproved", f"plan {pending.sum} is approved")
    if approval is None:
        return Cond(
            "IsPlanApproved",
            False,
            "WaitingForApproval",
            f"plan {pending.sum} waits for approval: annotate the layer with {ann.APPROVE_PLAN}={pending.sum}",
        )
    return Cond(
        "IsPlanApproved",
        False,
        "ApprovalMismatch",
        f"{ann.APPROVE_PLAN} is {approval!r}, but the pending plan is {pending.sum}; nothing is applied",
    )
