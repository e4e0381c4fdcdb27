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
from typing import Literal

from burrito_py.api import annotations as ann
from burrito_py.controllers.conditions import Cond
from burrito_py.timeutil import parse_time

LayerStateName = Literal["Idle", "PlanNeeded", "ApplyNeeded", "Running", "MaxRetriesReached"]
LAYER_STATES: tuple[LayerStateName, ...] = (
    "Idle",
    "PlanNeeded",
    "ApplyNeeded",
    "Running",
    "MaxRetriesReached",
)
TERMINAL_RUN_STATES = frozenset({"Succeeded", "Failed"})
NO_CHANGES = "No changes."


@dataclass(frozen=True, slots=True)
class RunView:
    """The few facts about a TerraformRun that layer decisions need."""

    name: str
    action: str
    state: str | None
    revision: str | None
    created: str = ""
    message: str = ""
    # A destroy plan (terraform plan -destroy), or the apply of one, made while the layer is deleted.
    destroy: bool = False
    # For an apply: the plan run it applies.
    artifact: str | None = None
    # metadata.generation of the layer when the run was created (a changed spec retries a failed destroy).
    layer_generation: int | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_RUN_STATES

    @property
    def failed(self) -> bool:
        # A run reaches `Failed` only once its retries are exhausted (docs/architecture.md §6).
        return self.state == "Failed"


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


@dataclass(frozen=True, slots=True)
class CreateRun:
    action: Literal["plan", "apply"]
    revision: str
    artifact_run: str | None = None
    artifact_attempt: int | None = None
    destroy: bool = False


@dataclass(frozen=True, slots=True)
class PendingPlanView:
    """The plan waiting for a manual approval (`status.pendingPlan`)."""

    sum: str
    run: str | None
    revision: str | None


@dataclass(frozen=True, slots=True)
class LayerDecision:
    state: LayerStateName | None
    conditions: tuple[Cond, ...]
    create_run: CreateRun | None
    remove_sync_now: bool
    pending_plan: PendingPlanView | None = None
    # The approve-plan annotation was acted on (an apply run of the approved plan is created): remove it.
    remove_approval: bool = False
    # The layer is being deleted and its destroy is done (or not wanted): let it go.
    remove_finalizer: bool = False
    # Annotate the layer `api.burrito-py.io/skip-destroy` with this reason (a CRD's deletion is behind the
    # layer's, and a live run is waited for first: the mark keeps the verdict until then).
    skip_destroy: str | None = None


def _exhausted(run: RunView | None, branch_commit: str | None) -> bool:
    return run is not None and run.failed and run.revision == branch_commit


def parse_plan_run(value: str | None) -> tuple[str, int] | None:
    """`<run>/<attempt>` → (run, attempt); None when absent or malformed."""
    if not value or "/" not in value:
        return None
    run, _, attempt = value.rpartition("/")
    if not run or not attempt.isdigit():
        return None
    return run, int(attempt)


def decide_layer(snap: LayerSnapshot, now: datetime) -> LayerDecision:
    a = snap.annotations
    branch_commit = a.get(ann.BRANCH_COMMIT)
    plan_sum = a.get(ann.PLAN_SUM)
    plan_commit = a.get(ann.PLAN_COMMIT)
    plan_date = parse_time(a.get(ann.PLAN_DATE))
    relevant_commit = a.get(ann.RELEVANT_COMMIT)

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

    plan_fresh = plan_sum is not None and plan_date is not None and plan_date + snap.drift_period > now
    plan_up_to_date = Cond(
        "IsPlanArtifactUpToDate",
        plan_fresh,
        "PlanIsRecent" if plan_fresh else ("NoPlanYet" if plan_sum is None else "DriftDetectionDue"),
    )

    relevant_date = parse_time(a.get(ann.RELEVANT_COMMIT_DATE))
    planned = plan_sum is not None and (
        (plan_commit is not None and plan_commit in (relevant_commit, branch_commit))
        or (plan_date is not None and relevant_date is not None and plan_date > relevant_date)
    )
    relevant_planned = Cond(
        "IsLastRelevantCommitPlanned",
        planned,
        "LastRelevantCommitPlanned" if planned else "NewRelevantCommit",
        "" if planned else f"commit {relevant_commit or branch_commit} has not been planned",
    )

    plan_run = snap.last_plan_run
    plan_failed = plan_sum is None or (plan_run is not None and plan_run.failed)
    last_plan_failed = Cond(
        "HasLastPlanFailed",
        plan_failed,
        "LastPlanFailed"
        if plan_run is not None and plan_run.failed
        else ("NoPlanYet" if plan_sum is None else "LastPlanSucceeded"),
        plan_run.message if plan_run is not None and plan_run.failed else "",
    )

    no_changes = a.get(ann.PLAN_SUMMARY) == NO_CHANGES
    apply_done = plan_sum is None or a.get(ann.APPLY_SUM) == plan_sum or no_changes
    apply_up_to_date = Cond(
        "IsApplyUpToDate",
        apply_done,
        "NothingToApply" if plan_sum is None or no_changes else ("PlanApplied" if apply_done else "PlanNotApplied"),
    )

    sync_now = ann.SYNC_NOW in a
    sync_scheduled = Cond("IsSyncScheduled", sync_now, "SyncNowRequested" if sync_now else "NoSyncRequested")

    plan_exhausted = _exhausted(plan_run, branch_commit)
    apply_exhausted = _exhausted(snap.last_apply_run, branch_commit) or _exhausted(snap.last_apply_run, plan_commit)
    last_exhausted = _exhausted(last, branch_commit) or (
        last is not None and last.action == "apply" and apply_exhausted
    )
    retry_limit = Cond(
        "HasLastRunReachedRetryLimit",
        last_exhausted,
        "RetryLimitReached" if last_exhausted else "RetriesAvailable",
        f"run {last.name} failed after its last retry: {last.message}".rstrip(": ") if last_exhausted and last else "",
    )

    state: LayerStateName
    if running:
        state = "Running"
    elif sync_now or ((not plan_fresh or not planned) and not plan_exhausted):
        state = "PlanNeeded"
    elif not apply_done and not plan_failed and not apply_exhausted:
        state = "ApplyNeeded"
    elif plan_exhausted or apply_exhausted or last_exhausted:
        state = "MaxRetriesReached"
    else:
        state = "Idle"

    # Under manual approval, the plan an apply would apply, and whether the approval names it.
    # A plan being applied waits for nothing: no pending plan while an apply runs.
    applying = live is not None and live.action == "apply"
    pending: PendingPlanView | None = None
    if (
        not snap.auto_apply
        and plan_sum is not None
        and not (apply_done or plan_failed or apply_exhausted or applying)
    ):
        pending = PendingPlanView(plan_sum, a.get(ann.PLAN_RUN), plan_commit)
    approval = a.get(ann.APPROVE_PLAN)
    approved = pending is not None and approval == pending.sum
    approval_cond = _approval_condition(snap.auto_apply, pending, approval, applying)

    create: CreateRun | None = None
    if state == "PlanNeeded":
        create = CreateRun("plan", branch_commit)
    elif state == "ApplyNeeded" and (snap.auto_apply or approved):
        artifact = parse_plan_run(a.get(ann.PLAN_RUN))
        if artifact is not None and plan_commit:
            create = CreateRun("apply", plan_commit, artifact[0], artifact[1])

    conditions = (
        is_running,
        plan_up_to_date,
        relevant_planned,
        last_plan_failed,
        apply_up_to_date,
        sync_scheduled,
        retry_limit,
        approval_cond,
    )
    return LayerDecision(
        state,
        conditions,
        create,
        remove_sync_now=sync_now and create is not None,
        pending_plan=pending,
        remove_approval=approved and create is not None and create.action == "apply",
    )


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
