"""A stale plan (issue 11 item 2): the runner's exit code 5 ends the run at once, `StalePlan`, no retry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from burrito_py.controllers.run.decide import AttemptView, PodView, RetryPolicy, RunSnapshot, decide_run
from burrito_py.timeutil import format_time

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(max_retries=3, grace_base=timedelta(seconds=10))
STARTED = format_time(NOW - timedelta(minutes=1))


def succeeded_reason(decision) -> str:  # type: ignore[no-untyped-def]
    return next(c.reason for c in decision.conditions if c.type == "HasSucceeded")


def test_exit_code_5_fails_the_run_at_once_as_stale_plan():
    pod = PodView("pod-1", "Failed", 5, "stale plan: Saved plan is stale", format_time(NOW))
    d = decide_run(RunSnapshot("Running", 0, (AttemptView(1, "pod-1", STARTED),), pod, POLICY), NOW)
    assert d.state == "Failed" and d.start_attempt is None and d.requeue_after is None and d.release_lease
    assert succeeded_reason(d) == "StalePlan" and d.message.startswith("stale plan: ")


def test_the_termination_message_alone_is_enough():
    pod = PodView("pod-1", "Failed", 1, "stale plan: Saved plan is stale", format_time(NOW))
    d = decide_run(RunSnapshot("Running", 0, (AttemptView(1, "pod-1", STARTED),), pod, POLICY), NOW)
    assert d.state == "Failed" and succeeded_reason(d) == "StalePlan"


def test_a_stored_failed_run_keeps_its_stale_plan_reason():
    attempt = AttemptView(1, "pod-1", STARTED, format_time(NOW), 5, logs_uploaded=True)
    d = decide_run(RunSnapshot("Failed", 1, (attempt,), None, POLICY), NOW)
    assert d.state == "Failed" and succeeded_reason(d) == "StalePlan"


def test_a_run_that_ended_keeps_its_message_and_reason_when_reconciled_again():
    """Re-reconciling a terminal run (resync, a wake-up) must not blank why it failed: the layer's lastResult
    and the StalePlan reason are read from it."""
    attempt = AttemptView(1, "pod-1", STARTED, format_time(NOW), 1, logs_uploaded=True)
    stored = RunSnapshot("Failed", 1, (attempt,), None, POLICY, message="stale plan: Saved plan is stale")
    d = decide_run(stored, NOW)
    assert d.message == "stale plan: Saved plan is stale" and succeeded_reason(d) == "StalePlan"
    failed = next(c for c in d.conditions if c.type == "HasSucceeded")
    assert failed.message == "stale plan: Saved plan is stale"
    plain = decide_run(RunSnapshot("Failed", 4, (attempt,), None, POLICY, message="Error: boom"), NOW)
    assert next(c.message for c in plain.conditions if c.type == "HasSucceeded") == "Error: boom"


def test_other_failures_are_still_retried():
    pod = PodView("pod-1", "Failed", 1, "Error: boom", format_time(NOW - timedelta(minutes=1)))
    d = decide_run(RunSnapshot("Running", 0, (AttemptView(1, "pod-1", STARTED),), pod, POLICY), NOW)
    assert d.state == "Retrying" and d.start_attempt == 2 and succeeded_reason(d) == "RunFailed"
