"""When a layer's plan is due for its drift check: on the layer's own beat, so layers planned together do not
plan again together.

Each layer has a phase φ in [0, P/2), P being the drift detection period, derived from its UID (a hash, so
the same on every controller and after a restart). Its beats are the instants φ + k·P/2 since the epoch. A
plan made at t is due at the first beat at or after t + P/2. Hence:
- a plan is never older than P when it is checked (the setting keeps its meaning) and never re-planned
  before P/2 (a fresh commit's plan is not checked again at once);
- from one drift check to the next is exactly P (the check's plan lands just after its beat, so the beat
  P/2 later is too soon and the one after is taken);
- layers planned in the same second spread their checks evenly over half a period.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def _micros(delta: timedelta) -> int:
    return delta // _US


def drift_phase(key: str, period: timedelta) -> timedelta:
    """The layer's offset into each half period (key: the layer's UID)."""
    half = _micros(period) // 2
    if half <= 0:
        return timedelta(0)
    digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return timedelta(microseconds=digest % half)


def drift_due(plan_date: datetime, period: timedelta, key: str) -> datetime:
    """When a plan made at `plan_date` is due for its drift check."""
    half = _micros(period) // 2
    if half <= 0:
        return plan_date + period
    phase = _micros(drift_phase(key, period))
    earliest = _micros(plan_date - _EPOCH) + half
    beats = -(-(earliest - phase) // half)  # ceiling division: the first beat at or after `earliest`
    return _EPOCH + timedelta(microseconds=phase + beats * half)
