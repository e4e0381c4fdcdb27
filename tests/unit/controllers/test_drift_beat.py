"""Drift checks on each layer's own beat (burrito_py/controllers/layer/drift.py)."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.controllers.layer.drift import drift_due, drift_phase

T0 = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)
periods = st.integers(min_value=2, max_value=7 * 24 * 3600).map(lambda s: timedelta(seconds=s))
moments = st.integers(min_value=0, max_value=10 * 365 * 24 * 3600 * 10**6).map(
    lambda us: datetime(2020, 1, 1, tzinfo=UTC) + timedelta(microseconds=us))
keys = st.text(min_size=0, max_size=40)


@given(moments, periods, keys)
def test_a_plan_is_checked_between_half_a_period_and_a_period_after_it(plan: datetime, period: timedelta,
                                                                        key: str) -> None:
    due = drift_due(plan, period, key)
    assert period / 2 <= due - plan <= period


@given(moments, periods, keys, st.integers(min_value=1, max_value=10**6))
def test_checks_are_one_period_apart_in_steady_state(plan: datetime, period: timedelta, key: str,
                                                     run_us: int) -> None:
    """The check's own plan lands a run's duration after its beat (less than half a period): the next check is
    one period after the previous one, whatever the run took."""
    first = drift_due(plan, period, key)
    run = min(timedelta(microseconds=run_us), period / 2 - timedelta(microseconds=1))
    if run <= timedelta(0):
        return
    assert drift_due(first + run, period, key) == first + period


@given(moments, periods, keys)
def test_the_beat_is_a_function_of_the_key_alone(plan: datetime, period: timedelta, key: str) -> None:
    assert drift_due(plan, period, key) == drift_due(plan, period, key)
    assert timedelta(0) <= drift_phase(key, period) < period / 2


def test_layers_planned_in_the_same_second_spread_over_half_a_period() -> None:
    """Issue 12's figure: 1,000 layers planned in one second; the largest share whose check starts in any one
    second stays well under 2 % (20 minutes' period: 600 one-second slots for 1,000 layers)."""
    period = timedelta(minutes=20)
    dues = [drift_due(T0, period, str(uuid.uuid4())) for _ in range(1000)]
    per_second = Counter(int(d.timestamp()) for d in dues)
    assert max(per_second.values()) <= 20
    spread = max(dues) - min(dues)
    assert spread >= period / 2 * 0.95


def test_a_tiny_period_has_no_beat() -> None:
    assert drift_due(T0, timedelta(microseconds=1), "x") == T0 + timedelta(microseconds=1)
