"""What a TerraformLayer needs next (DESIGN §5): conditions and state as pure functions.

The snapshot is built from the layer's annotations and the runs the controller already holds in
memory, so evaluating a layer (on every event and every drift tick) costs no API or datastore call.
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

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_RUN_STATES

    @property
    def failed(self) -> bool:
        # A run reaches `Failed` only once its retries are exhausted (DESIGN §6).
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


@dataclass(frozen=True, slots=True)
class LayerDecision:
    state: LayerStateName | None
    conditions: tuple[Cond, ...]
    create_run: CreateRun | None
    remove_sync_now: bool


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

    create: CreateRun | None = None
    if state == "PlanNeeded":
        create = CreateRun("plan", branch_commit)
    elif state == "ApplyNeeded" and snap.auto_apply:
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
    )
    return LayerDecision(state, conditions, create, remove_sync_now=sync_now and create is not None)
