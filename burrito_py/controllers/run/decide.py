"""What a TerraformRun needs next (docs/architecture.md §6): conditions, state and effects as pure functions.

`retries` counts the attempts that failed. A run gets `1 + maxRetries` attempts; after the n-th
failure it waits `failureGracePeriod * 2^(n-1)` (capped) before the next one.

One failure is never retried: an apply the runner refused because Terraform called its saved plan stale (exit
code 5, termination message `stale plan: …`). The same plan would fail again; the run ends `Failed` with the
HasSucceeded reason `StalePlan` and the layer plans again (docs/architecture.md §5.2).

A pod that never starts (an image that cannot be pulled, a Secret it needs missing, no node for it) says why in
the `RunnerPodStarted` condition; past the start timeout it is deleted, and its attempt fails once the pod is gone,
so neither the next attempt nor the Lease's release overlaps a Terraform that might still start (§6.1).

A pod that runs longer than its timeout (its `activeDeadlineSeconds`, the plan or apply timeout) is stopped by its
kubelet (`DeadlineExceeded`); its attempt fails once its container has stopped, and is not retried (`TimedOut`):
what hung once would hold the layer as long again.

A pod that is still there well after its deletion's grace period (its node lost or partitioned: no kubelet confirms
it stopped) keeps its attempt running, as Terraform may still run there, and the `RunnerPodStopped` condition says
so and what to do once it is known not to (§6.1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from burrito_py.durations import format_duration
from burrito_py.kube.conditions import Cond
from burrito_py.timeutil import format_time, parse_time

RunStateName = Literal["Initial", "Running", "Retrying", "FailureGracePeriod", "Succeeded", "Failed"]
RUN_STATES: tuple[RunStateName, ...] = (
    "Initial",
    "Running",
    "Retrying",
    "FailureGracePeriod",
    "Succeeded",
    "Failed",
)
TERMINAL: frozenset[str] = frozenset({"Succeeded", "Failed"})
ACTIVE_POD_PHASES = frozenset({"Pending", "Running"})
# The runner's exit code and termination message prefix for an apply of a stale plan (the contract with it).
STALE_PLAN_EXIT_CODE = 5
STALE_PLAN_PREFIX = "stale plan: "
STALE_PLAN = "StalePlan"
# The kubelet's pod reason when it stopped a pod at its activeDeadlineSeconds, and the run's HasSucceeded reason then.
DEADLINE_EXCEEDED = "DeadlineExceeded"
TIMED_OUT = "TimedOut"
TIMED_OUT_SAYS = "was stopped at its timeout, not retried"  # how the layer and its notifications tell such a run
STARTED_CONDITION = "RunnerPodStarted"
START_TIMEOUT = "StartTimeout"
# A condition's reason as the API validates it (metav1.Condition); a kubelet's own reasons all match.
_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
# What every pod passes through on its way to start: not worth a condition (two more status writes per attempt),
# only worth naming if the start timeout passes on it.
ON_ITS_WAY = frozenset({"ContainerCreating", "PodInitializing"})
STOPPED_CONDITION = "RunnerPodStopped"
STOP_OVERDUE = "StopOverdue"
# How long past its deletionTimestamp (the end of its grace period) a pod may still be there before the run says its
# node may be lost: a kubelet confirms a stop within seconds of it.
STOP_MARGIN = timedelta(minutes=2)


def is_stale_plan(exit_code: int | None, message: str) -> bool:
    return exit_code == STALE_PLAN_EXIT_CODE or message.startswith(STALE_PLAN_PREFIX)


@dataclass(frozen=True, slots=True)
class AttemptView:
    number: int
    pod_name: str
    started_at: str | None
    finished_at: str | None = None
    exit_code: int | None = None
    logs_uploaded: bool = False
    # Why its pod was given up before it started (its start timeout passed): the attempt's failure message.
    not_started: str | None = None


@dataclass(frozen=True, slots=True)
class PodView:
    name: str
    phase: str | None
    exit_code: int | None = None
    message: str = ""
    finished_at: str | None = None
    # The watch saw this pod deleted (a DELETE event): it is gone, whatever its last phase was.
    gone: bool = False
    # Whether its container has run at all; while not, `waiting` is the kubelet's or scheduler's (reason, message).
    started: bool = True
    waiting: tuple[str, str] | None = None
    uid: str | None = None
    deleting: bool = False  # it has a deletionTimestamp
    deleting_until: str | None = None  # that deletionTimestamp: the end of its grace period
    node: str = ""  # spec.nodeName
    # This run's own pod (its controller owner reference and run label): only such a pod is ever deleted.
    owned: bool = True
    reason: str = ""  # the pod's status.reason (DeadlineExceeded: its kubelet stopped it at its deadline)
    running: bool = False  # a container still runs (a pod stopped at its deadline is Failed while it stops)
    deadline_seconds: int | None = None  # its spec.activeDeadlineSeconds

    @property
    def stopping(self) -> bool:
        """Stopped by its kubelet at its deadline, and its container still runs: `Failed` while its runner stops
        Terraform, as a kubelet that writes the phase first reports it (Kubernetes' own holds `Failed` back
        until no container runs, so its pod is simply `Running` until then). It ends once no container runs, so
        neither a state lock's release nor the Lease's (nor the next attempt) overlaps that Terraform. (Only
        then: a pod `Failed` for another reason, e.g. its node lost, may keep a `running` container state that
        no kubelet will ever update.)"""
        return self.reason == DEADLINE_EXCEEDED and self.running


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 3
    grace_base: timedelta = timedelta(seconds=15)
    grace_cap: timedelta = timedelta(hours=1)
    # How long a just-created runner pod may be missing from the watch before we call it lost.
    pod_appearance_grace: timedelta = timedelta(seconds=60)
    # How long an attempt's pod may stay unstarted before it is deleted and the attempt fails; zero: no limit.
    start_timeout: timedelta = timedelta(minutes=10)

    def backoff(self, retries: int) -> timedelta:
        if retries <= 0:
            return timedelta(0)
        # Cap the exponent too: 2**retries overflows timedelta long before the cap matters.
        factor: int = 2 ** min(retries - 1, 30)
        return min(self.grace_base * factor, self.grace_cap)


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    state: str | None
    retries: int
    attempts: tuple[AttemptView, ...]
    pod: PodView | None  # the runner pod of the latest attempt, as last observed
    policy: RetryPolicy
    # The HasSucceeded message and reason as stored: a run that ended keeps why (the layer's lastResult shows it).
    message: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class FinishAttempt:
    number: int
    succeeded: bool
    exit_code: int | None
    finished_at: str | None
    message: str
    timed_out: bool = False  # its pod was stopped at its deadline: never retried


@dataclass(frozen=True, slots=True)
class GiveUpPod:
    """Delete the latest attempt's pod, which did not start in time. `record`: first time, so write `message` on
    the attempt and say it in an event; later decisions only ask again for a deletion that did not happen."""

    number: int
    pod_name: str
    pod_uid: str | None
    message: str
    record: bool


@dataclass(frozen=True, slots=True)
class RunDecision:
    state: RunStateName
    retries: int
    conditions: tuple[Cond, ...]
    finish: FinishAttempt | None = None
    start_attempt: int | None = None
    upload_logs: tuple[int, ...] = ()
    release_lease: bool = False
    requeue_after: timedelta | None = None
    message: str = ""
    give_up: GiveUpPod | None = None


def _observe_latest(snap: RunSnapshot, now: datetime) -> FinishAttempt | None:
    """The latest attempt's outcome if it has just ended (its pod terminated or vanished)."""
    latest = snap.attempts[-1]
    if latest.finished_at is not None:
        return None
    pod = snap.pod
    given_up = latest.not_started
    if pod is not None and pod.name == latest.pod_name and pod.gone:
        return FinishAttempt(latest.number, False, None, None,
                             given_up or f"runner pod {latest.pod_name} disappeared (deleted)")
    if pod is not None and pod.name == latest.pod_name:
        if pod.phase in ACTIVE_POD_PHASES or pod.phase is None or pod.stopping:
            return None
        succeeded = pod.phase == "Succeeded"
        if pod.reason == DEADLINE_EXCEEDED and not succeeded:
            limit = (f"its timeout of {format_duration(timedelta(seconds=pod.deadline_seconds))}"
                     if pod.deadline_seconds else "its activeDeadlineSeconds")
            stopped = f"runner pod {pod.name} ran longer than {limit} and was stopped"
            return FinishAttempt(latest.number, False, pod.exit_code, pod.finished_at,
                                 f"{stopped}: {pod.message}" if pod.message else stopped, timed_out=True)
        # A pod given up and stopped before its runner said anything failed for the reason it was given up.
        message = given_up if given_up and pod.exit_code is None and not succeeded else pod.message
        return FinishAttempt(latest.number, succeeded, pod.exit_code, pod.finished_at, message)
    started = parse_time(latest.started_at)
    if started is not None and now - started < snap.policy.pod_appearance_grace:
        return None  # created moments ago; the watch has not shown it to us yet
    return FinishAttempt(latest.number, False, None, None, given_up or f"runner pod {latest.pod_name} disappeared")


def _not_started(snap: RunSnapshot, now: datetime) -> tuple[Cond | None, GiveUpPod | None, timedelta | None]:
    """For the latest attempt's pod while it has not started: the `RunnerPodStarted` condition saying why, the
    pod to give up once the start timeout has passed, and when to look again for that timeout."""
    latest, pod, timeout = snap.attempts[-1], snap.pod, snap.policy.start_timeout
    if pod is None or pod.name != latest.pod_name or pod.gone or pod.started or pod.phase not in (None, "Pending"):
        return None, None, None
    reason, detail = pod.waiting or ("", "")
    why = f"{reason}: {detail}".strip(": ") or "not scheduled or started yet"
    if latest.not_started is not None:
        again = pod.owned and not pod.deleting
        give_up = GiveUpPod(latest.number, pod.name, pod.uid, latest.not_started, False) if again else None
        return Cond(STARTED_CONDITION, False, START_TIMEOUT, f"{latest.not_started}: deleting it"), give_up, None
    started = parse_time(latest.started_at)
    until, look_again = "", None
    if timeout and started is not None and pod.owned:  # never a deadline for a pod that is not the run's own
        deadline = started + timeout
        if now >= deadline:
            message = f"runner pod {pod.name} did not start within {format_duration(timeout)} ({why})"
            give_up = GiveUpPod(latest.number, pod.name, pod.uid, message, True)
            return Cond(STARTED_CONDITION, False, START_TIMEOUT, f"{message}: deleting it"), give_up, None
        until, look_again = f"; the attempt fails if it has not started by {format_time(deadline)}", deadline - now
    shown = reason if _REASON.fullmatch(reason) and reason not in ON_ITS_WAY else None
    cond = Cond(STARTED_CONDITION, False, shown, f"pod {pod.name}: {why}{until}") if shown else None
    return cond, None, None if look_again is None else look_again + timedelta(seconds=1)


def _stop_overdue(snap: RunSnapshot, now: datetime) -> tuple[Cond | None, timedelta | None]:
    """For the latest attempt's pod while it is being deleted and may still run: the `RunnerPodStopped` condition
    once it is still there `STOP_MARGIN` after its grace period ended, else when to look again."""
    latest, pod = snap.attempts[-1], snap.pod
    if pod is None or pod.name != latest.pod_name or pod.gone or not pod.deleting:
        return None, None
    if pod.phase not in (None, *ACTIVE_POD_PHASES) and not pod.stopping:
        return None, None  # it ended: its attempt ends with it
    until = parse_time(pod.deleting_until)
    if until is None:
        return None, None
    if now < until + STOP_MARGIN:
        return None, until + STOP_MARGIN - now + timedelta(seconds=1)
    on = f" on node {pod.node}" if pod.node else ""
    return Cond(STOPPED_CONDITION, False, STOP_OVERDUE, (
        f"runner pod {pod.name}{on} was to be stopped by {format_time(until)} and is still there: its node may be "
        "unreachable. The run waits, as Terraform may still run there; once you know it does not (the node is "
        f"gone or restarted), delete the pod with --force --grace-period=0 and the attempt ends")), None


def _appearance_deadline(snap: RunSnapshot, now: datetime) -> timedelta | None:
    """While the latest attempt's pod has not been seen, look again when its appearance grace ends: a pod
    that never shows up is then a failed attempt, found without waiting for the periodic resync."""
    latest = snap.attempts[-1]
    if snap.pod is not None and snap.pod.name == latest.pod_name:
        return None
    started = parse_time(latest.started_at)
    if started is None:
        return None
    return max(started + snap.policy.pod_appearance_grace - now, timedelta(0)) + timedelta(seconds=1)


# Admission's reason for a pull request's apply it refuses (pullrequests/apply.py `apply_admission`).
APPLY_NOT_ALLOWED = "ApplyNotAllowed"
# The same, when the pull request was merged or closed: never admitted again, whether an attempt ran or not.
PULL_REQUEST_ENDED = "PullRequestEnded"


def refused_for_good(snap: RunSnapshot, decision: RunDecision, reason: str, message: str) -> RunDecision | None:
    """The run's end when admission refuses its next attempt for good, else None. A pull request's apply refused
    before a retry (`APPLY_NOT_ALLOWED`: since its first attempt ran, the pull request moved to another head, was
    merged or closed, or lost the layer's lock) is never admitted again: it fails now and its Lease goes, rather than
    wait forever holding the layer's state from every other run. A first attempt refused so waits (the controllers'
    view of the lock may lag behind the pull request's, and the pull request discards a run that never ran at a head
    it no longer has), unless its pull request was merged or closed (`PULL_REQUEST_ENDED`): that is final, and the
    pull request keeps such a run, so it would wait forever."""
    if decision.start_attempt is None or not (
            reason == PULL_REQUEST_ENDED or (reason == APPLY_NOT_ALLOWED and snap.attempts)):
        return None
    return RunDecision("Failed", decision.retries,
                       _conditions("Failed", decision.retries, snap.policy, None, message),
                       upload_logs=decision.upload_logs, release_lease=True, message=message)


def decide_run(snap: RunSnapshot, now: datetime) -> RunDecision:
    policy = snap.policy
    pending_logs = tuple(a.number for a in snap.attempts if (a.finished_at is not None and not a.logs_uploaded))
    if snap.state in TERMINAL:
        state: RunStateName = "Succeeded" if snap.state == "Succeeded" else "Failed"
        stale = state == "Failed" and bool(snap.attempts) and is_stale_plan(snap.attempts[-1].exit_code, snap.message)
        timed_out = state == "Failed" and snap.reason == TIMED_OUT
        return RunDecision(
            state,
            snap.retries,
            _conditions(state, snap.retries, policy, None, snap.message, stale=stale, timed_out=timed_out),
            upload_logs=pending_logs,
            release_lease=True,
            message=snap.message,
        )

    if not snap.attempts:
        return RunDecision("Initial", 0, _conditions("Initial", 0, policy, None), start_attempt=1)

    latest = snap.attempts[-1]
    finish = _observe_latest(snap, now)
    retries = snap.retries
    if finish is not None:
        pending_logs = (*pending_logs, finish.number)
        if not finish.succeeded:
            retries += 1
        succeeded, finished_at = finish.succeeded, parse_time(finish.finished_at) or now
    elif latest.finished_at is not None:
        succeeded = latest.exit_code == 0
        finished_at = parse_time(latest.finished_at) or now
    else:
        waiting, give_up, start_deadline = _not_started(snap, now)
        overdue, stop_deadline = _stop_overdue(snap, now)
        requeue = [t for t in (_appearance_deadline(snap, now), start_deadline, stop_deadline) if t is not None]
        return RunDecision(
            "Running",
            retries,
            (*_conditions("Running", retries, policy, None), *(c for c in (waiting, overdue) if c is not None)),
            upload_logs=pending_logs,
            requeue_after=min(requeue, default=None),
            give_up=give_up,
        )

    if succeeded:
        return RunDecision(
            "Succeeded",
            retries,
            _conditions("Succeeded", retries, policy, None),
            finish=finish,
            upload_logs=pending_logs,
            release_lease=True,
        )
    message = finish.message if finish is not None else ""
    exit_code = finish.exit_code if finish is not None else latest.exit_code
    stale = is_stale_plan(exit_code, message)
    timed_out = finish is not None and finish.timed_out
    if retries > policy.max_retries or stale or timed_out:
        return RunDecision(
            "Failed",
            retries,
            _conditions("Failed", retries, policy, None, message, stale=stale, timed_out=timed_out),
            finish=finish,
            upload_logs=pending_logs,
            release_lease=True,
            message=message,
        )
    retry_at = finished_at + policy.backoff(retries)
    if now < retry_at:
        return RunDecision(
            "FailureGracePeriod",
            retries,
            _conditions("FailureGracePeriod", retries, policy, retry_at, message),
            finish=finish,
            upload_logs=pending_logs,
            requeue_after=retry_at - now,
            message=message,
        )
    return RunDecision(
        "Retrying",
        retries,
        _conditions("Retrying", retries, policy, None, message),
        finish=finish,
        upload_logs=pending_logs,
        start_attempt=latest.number + 1,
        message=message,
    )


def _conditions(
    state: RunStateName,
    retries: int,
    policy: RetryPolicy,
    retry_at: datetime | None,
    message: str = "",
    *,
    stale: bool = False,
    timed_out: bool = False,
) -> tuple[Cond, ...]:
    limit = retries > policy.max_retries
    failed_reason = STALE_PLAN if stale else TIMED_OUT if timed_out else "RunFailed"
    return (
        Cond("HasStatus", True, "StatusKnown"),
        Cond(
            "HasReachedRetryLimit",
            limit,
            "RetryLimitReached" if limit else "RetriesAvailable",
            f"{retries} failed attempt(s), {policy.max_retries} retries allowed",
        ),
        Cond(
            "HasSucceeded",
            state == "Succeeded",
            "RunSucceeded"
            if state == "Succeeded"
            else (failed_reason if state in ("Failed", "FailureGracePeriod", "Retrying") else "NotFinished"),
            message,
        ),
        Cond("IsRunning", state == "Running", "RunnerPodActive" if state == "Running" else "NoActivePod"),
        Cond(
            "IsInFailureGracePeriod",
            retry_at is not None,
            "WaitingBeforeRetry" if retry_at is not None else "NotWaiting",
            f"next attempt after {retry_at.isoformat()}" if retry_at is not None else "",
        ),
    )
