"""When a repository whose source archive could not be stored is synced again (controllers/repository/decide.py):
soon while the datastore is starting, then less often, never later than the poll interval."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.controllers.repository.decide import (
    SOURCE_RETRY_FIRST,
    source_not_stored_reason,
    source_retry_delay,
)
from burrito_py.timeutil import format_time

NOW = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
POLL = timedelta(minutes=5)


def repository(status: str, reason: str, since: datetime) -> dict[str, Any]:
    return {"metadata": {"name": "repo", "namespace": "team-a"},
            "status": {"conditions": [{"type": "Synced", "status": status, "reason": reason, "message": "",
                                       "lastTransitionTime": format_time(since)}]}}


def test_the_first_failure_is_tried_again_within_seconds() -> None:
    assert source_retry_delay({"metadata": {}}, "DatastoreUnavailable", NOW, POLL) == SOURCE_RETRY_FIRST
    synced = repository("True", "FetchSucceeded", NOW - timedelta(hours=1))
    assert source_retry_delay(synced, "DatastoreUnavailable", NOW, POLL) == SOURCE_RETRY_FIRST


def test_a_longer_failure_waits_as_long_as_it_has_lasted_up_to_the_poll_interval() -> None:
    for lasted, wait in ((timedelta(seconds=1), SOURCE_RETRY_FIRST), (timedelta(seconds=8), timedelta(seconds=8)),
                         (timedelta(hours=2), POLL)):
        failing = repository("False", "DatastoreUnavailable", NOW - lasted)
        assert source_retry_delay(failing, "DatastoreUnavailable", NOW, POLL) == wait


def test_another_failure_before_it_starts_the_count_afresh() -> None:
    fetch_failed = repository("False", "FetchFailed", NOW - timedelta(hours=2))
    assert source_retry_delay(fetch_failed, "DatastoreUnavailable", NOW, POLL) == SOURCE_RETRY_FIRST


def test_no_answer_or_5xx_is_unavailability_and_a_4xx_a_refusal() -> None:
    assert [source_not_stored_reason(code) for code in (None, 500, 503, 413, 403)] == [
        "DatastoreUnavailable", "DatastoreUnavailable", "DatastoreUnavailable", "SourceNotStored", "SourceNotStored"]


@given(lasted=st.integers(min_value=-3600, max_value=10**6), poll=st.integers(min_value=0, max_value=86_400),
       longer=st.integers(min_value=0, max_value=10**5))
def test_the_wait_is_bounded_and_grows_with_the_failure(lasted: int, poll: int, longer: int) -> None:
    """Never sooner than the first retry, never later than the poll interval (or the first retry, if the poll is
    shorter), and a failure that has lasted longer never waits less: a datastore down for long costs a fetch per
    poll, not one every two seconds."""
    period = timedelta(seconds=poll)
    failing = repository("False", "DatastoreUnavailable", NOW - timedelta(seconds=lasted))
    wait = source_retry_delay(failing, "DatastoreUnavailable", NOW, period)
    assert SOURCE_RETRY_FIRST <= wait <= max(period, SOURCE_RETRY_FIRST)
    older = repository("False", "DatastoreUnavailable", NOW - timedelta(seconds=lasted + longer))
    assert source_retry_delay(older, "DatastoreUnavailable", NOW, period) >= wait
