"""Leader election on a coordination.k8s.io/v1 Lease: the decisions, without I/O (the executor is
`leader_election.py`).

Expiry is judged as client-go judges it: on this candidate's own monotonic clock, from the moment it last
saw the record change (its `resourceVersion`), never from the timestamps inside the record, which another
machine's wall clock wrote. A candidate takes a Lease only after it saw the same record unchanged for the
record's `leaseDurationSeconds`.

The leader believes it leads until `renewed_at + renew_deadline`, where `renewed_at` is when its last
successful acquire or renew was *sent*. The write landed after it was sent, and others see it later still, so
no other candidate can take the Lease before `renewed_at + lease_duration`: with `renew_deadline <
lease_duration`, the leader has stopped before anyone else starts, whatever the clocks' offsets and the
requests' delays (clocks are assumed to tick at the same rate; the gap `lease_duration - renew_deadline`
absorbs small drift).

Where this differs from client-go: a record naming our identity counts as ours only when this process wrote
it. A restarted container keeps its pod name, and a fresh process cannot know that the one before it is gone
(or that no other pod shares a hostname), so it waits for expiry like any other candidate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import Enum
from typing import Any

LEASE_API_VERSION = "coordination.k8s.io/v1"


class Action(Enum):
    CREATE = "create"  # no Lease yet: create it, held by us
    ACQUIRE = "acquire"  # expired or released: replace it (resourceVersion-guarded), held by us
    RENEW = "renew"  # ours: replace it with a new renewTime
    WAIT = "wait"  # someone else's and still valid, or ours and not yet due: look again at `wake_at`
    STEP_DOWN = "step_down"  # we led and can no longer be sure: stop acting now


@dataclass(frozen=True)
class Timing:
    lease_duration: float
    renew_deadline: float
    retry_period: float

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election needs 0 < retry_period < renew_deadline < lease_duration, got "
                f"retry_period={self.retry_period}, renew_deadline={self.renew_deadline}, "
                f"lease_duration={self.lease_duration}"
            )


@dataclass(frozen=True)
class LeaseRecord:
    """The parts of a Lease the election reads."""

    holder: str  # "" when released
    lease_duration: float  # the record's leaseDurationSeconds
    transitions: int
    resource_version: str
    acquire_time: str | None = None

    @classmethod
    def from_body(cls, body: Mapping[str, Any], default_duration: float) -> LeaseRecord:
        spec = body.get("spec") or {}
        return cls(
            holder=spec.get("holderIdentity") or "",
            lease_duration=float(spec.get("leaseDurationSeconds") or default_duration),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=str((body.get("metadata") or {}).get("resourceVersion") or ""),
            acquire_time=spec.get("acquireTime"),
        )


@dataclass(frozen=True)
class Observation:
    """The record as last read (None: there is no Lease) and when, on our clock, it last changed."""

    record: LeaseRecord | None
    observed_at: float


def observe(previous: Observation | None, record: LeaseRecord | None, now: float) -> Observation:
    """What a read shows: the expiry clock restarts only when the record changed."""
    if previous is not None and _same(previous.record, record):
        return replace(previous, record=record)
    return Observation(record, now)


def _same(a: LeaseRecord | None, b: LeaseRecord | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.resource_version == b.resource_version


@dataclass(frozen=True)
class Decision:
    action: Action
    wake_at: float  # when to decide again (for WAIT; the others act now)


def leading_until(renewed_at: float | None, timing: Timing) -> float | None:
    """Until when a leader whose last successful write was sent at `renewed_at` may act."""
    return None if renewed_at is None else renewed_at + timing.renew_deadline


def decide(
    identity: str, observation: Observation | None, renewed_at: float | None, timing: Timing, now: float
) -> Decision:
    """The next step of candidate `identity`. `renewed_at`: when our last successful acquire or renew was sent
    (None: we do not lead); `observation`: the record as we last read or wrote it."""
    record = observation.record if observation is not None else None
    if renewed_at is not None:
        deadline = renewed_at + timing.renew_deadline
        if now >= deadline or record is None or record.holder != identity:
            return Decision(Action.STEP_DOWN, now)
        due = renewed_at + timing.retry_period
        if now >= due:
            return Decision(Action.RENEW, now)
        return Decision(Action.WAIT, due)
    if observation is None:
        return Decision(Action.WAIT, now)  # read first
    if record is None:
        return Decision(Action.CREATE, now)
    if not record.holder or now >= observation.observed_at + record.lease_duration:
        return Decision(Action.ACQUIRE, now)
    # Held by another (or by an earlier process of ours): look again every retry period, so a renewal or a
    # release is seen within one.
    return Decision(Action.WAIT, min(now + timing.retry_period, observation.observed_at + record.lease_duration))


def accept_write(renewed_at: float | None, sent_at: float, received_at: float, timing: Timing) -> float | None:
    """After a successful acquire or renew sent at `sent_at` whose answer came at `received_at`: the new
    `renewed_at`, or None when the answer came too late to count (after the deadline it had to meet)."""
    if received_at >= sent_at + timing.renew_deadline:
        return None
    if renewed_at is not None and received_at >= renewed_at + timing.renew_deadline:
        return None  # we had already stepped down when the answer came
    return sent_at


def lease_body(
    *,
    name: str,
    namespace: str,
    identity: str,
    timing: Timing,
    previous: LeaseRecord | None,
    wall_now: datetime,
    renew: bool,
) -> dict[str, Any]:
    """The Lease we write to create, acquire or renew it (holder = us)."""
    stamp = micro_time(wall_now)
    taking_over = previous is None or previous.holder != identity or not renew
    acquire_time = stamp if taking_over or previous is None else (previous.acquire_time or stamp)
    transitions = 0 if previous is None else previous.transitions + (1 if previous.holder != identity else 0)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if previous is not None:
        metadata["resourceVersion"] = previous.resource_version
    return {
        "apiVersion": LEASE_API_VERSION,
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": identity,
            "leaseDurationSeconds": math.ceil(timing.lease_duration),
            "acquireTime": acquire_time,
            "renewTime": stamp,
            "leaseTransitions": transitions,
        },
    }


def release_body(*, name: str, namespace: str, previous: LeaseRecord, wall_now: datetime) -> dict[str, Any]:
    """The Lease a stopping leader writes (as client-go's ReleaseOnCancel): no holder, so a candidate takes it
    at its next look instead of waiting for expiry."""
    stamp = micro_time(wall_now)
    return {
        "apiVersion": LEASE_API_VERSION,
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": previous.resource_version},
        "spec": {
            "holderIdentity": None,
            "leaseDurationSeconds": 1,
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": previous.transitions,
        },
    }


def micro_time(moment: datetime) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
