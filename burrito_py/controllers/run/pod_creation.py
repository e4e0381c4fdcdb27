"""A runner pod the API refuses to create (docs/architecture.md §6.3): how long to wait before trying again,
and how the refusal shows on the run, its layer and an AGL instance (pure).

A refusal (e.g. 403: the runner ServiceAccount is missing in the namespace) is not a failed attempt: no
Terraform ran, so it does not use up the run's retries. The run keeps its state, records the failures in
`status.podCreation`, shows `RunnerPodCreated=False` with the API's message, and tries again after an
exponential backoff: `failure_grace_period * 2^(n-1)`, capped at the smaller of `failure_grace_period_cap` and
five minutes (a fixed namespace should not wait an hour).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from burrito_py.kube.conditions import Cond
from burrito_py.timeutil import parse_time

CONDITION = "RunnerPodCreated"
REASON_FAILED = "PodCreationFailed"
EVENT_REASON = "RunnerPodCreationFailed"  # a 403 is posted as `Forbidden`, as every 403 (forbidden.py)
LONGEST_WAIT = timedelta(minutes=5)
# How the layer's lastResult (and from there an AGL instance's Ready condition) says a run cannot start.
RESULT_PREFIX = "cannot start: "


@dataclass(frozen=True, slots=True)
class PodCreation:
    """`status.podCreation` of a run: failed creations since the last successful one."""

    failures: int = 0
    last_failure: datetime | None = None
    message: str = ""

    @classmethod
    def of(cls, status: Mapping[str, Any]) -> PodCreation:
        raw = status.get("podCreation") or {}
        return cls(int(raw.get("failures") or 0), parse_time(raw.get("lastFailure")), str(raw.get("message") or ""))


def backoff(failures: int, base: timedelta, cap: timedelta) -> timedelta:
    if failures <= 0:
        return timedelta(0)
    factor: int = 2 ** min(failures - 1, 30)
    return min(base * factor, cap, LONGEST_WAIT)


def wait_before_creating(record: PodCreation, now: datetime, base: timedelta, cap: timedelta) -> timedelta | None:
    """Time left before the next creation may be tried; None when it may be tried now."""
    if record.failures <= 0 or record.last_failure is None:
        return None
    due = record.last_failure + backoff(record.failures, base, cap)
    return due - now if now < due else None


def condition(record: PodCreation, next_try: datetime | None) -> Cond | None:
    """`RunnerPodCreated=False` while creations fail; nothing once one succeeded."""
    if record.failures <= 0:
        return None
    when = f"; next try after {next_try.isoformat()}" if next_try is not None else ""
    return Cond(CONDITION, False, REASON_FAILED, f"{record.message} ({record.failures} failed creation(s){when})")


def pod_surely_absent(status: int) -> bool:
    """Whether a refused create certainly made no pod, so the Lease may go while the run backs off. A 4xx
    (other than 409) is a refusal before any write; after a 5xx or a lost answer the pod may exist and run
    (the next try's 409 finds it and has it deleted), so the Lease is kept."""
    return 400 <= status < 500 and status != 409


def blocked_message(run: Mapping[str, Any]) -> str | None:
    """Why a live run cannot start its pod, for the layer's lastResult; None when nothing blocks it."""
    status = run.get("status") or {}
    if status.get("state") in ("Succeeded", "Failed"):
        return None
    record = PodCreation.of(status)
    if record.failures <= 0:
        return None
    action = str((run.get("spec") or {}).get("action") or "run").capitalize()
    return f"{action} {RESULT_PREFIX}{record.message}"[:300]


def is_blocked_result(last_result: str | None) -> bool:
    """Whether a layer's lastResult says its run cannot start (see blocked_message)."""
    _, _, rest = str(last_result or "").partition(" ")
    return rest.startswith(RESULT_PREFIX)
