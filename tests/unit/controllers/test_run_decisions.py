from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.controllers.run.decide import RUN_STATES, AttemptView, PodView, RetryPolicy, RunSnapshot, decide_run
from burrito_py.timeutil import format_time

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(max_retries=2, grace_base=timedelta(seconds=10), grace_cap=timedelta(seconds=25))


def attempt(
    n: int,
    *,
    finished: datetime | None = None,
    exit_code: int | None = None,
    started: datetime = NOW - timedelta(minutes=5),
) -> AttemptView:
    return AttemptView(n, f"pod-{n}", format_time(started), format_time(finished) if finished else None, exit_code)


def test_new_run_starts_its_first_attempt():
    d = decide_run(RunSnapshot(None, 0, (), None, POLICY), NOW)
    assert d.state == "Initial" and d.start_attempt == 1


def test_active_pod_is_running():
    d = decide_run(RunSnapshot("Running", 0, (attempt(1),), PodView("pod-1", "Running"), POLICY), NOW)
    assert d.state == "Running" and d.start_attempt is None and d.finish is None


def test_just_created_pod_not_yet_observed_is_running():
    a = attempt(1, started=NOW - timedelta(seconds=2))
    d = decide_run(RunSnapshot("Running", 0, (a,), None, POLICY), NOW)
    assert d.state == "Running" and d.finish is None


def test_vanished_pod_counts_as_a_failed_attempt():
    d = decide_run(RunSnapshot("Running", 0, (attempt(1),), None, POLICY), NOW)
    assert d.finish is not None and not d.finish.succeeded and "disappeared" in d.finish.message
    assert d.retries == 1 and d.state == "FailureGracePeriod"


def test_succeeded_pod_finishes_the_run_uploads_logs_and_releases_the_lease():
    pod = PodView("pod-1", "Succeeded", 0, finished_at=format_time(NOW))
    d = decide_run(RunSnapshot("Running", 0, (attempt(1),), pod, POLICY), NOW)
    assert d.state == "Succeeded" and d.release_lease and d.upload_logs == (1,)
    assert d.finish is not None and d.finish.succeeded


def test_failures_back_off_exponentially_then_fail_at_the_limit():
    pod = PodView("pod-1", "Failed", 1, "boom", format_time(NOW))
    d = decide_run(RunSnapshot("Running", 0, (attempt(1),), pod, POLICY), NOW)
    assert (d.state, d.retries, d.requeue_after) == ("FailureGracePeriod", 1, timedelta(seconds=10))
    assert not d.release_lease
    # grace period over → next attempt
    a1 = attempt(1, finished=NOW, exit_code=1)
    d = decide_run(RunSnapshot("FailureGracePeriod", 1, (a1,), pod, POLICY), NOW + timedelta(seconds=10))
    assert d.state == "Retrying" and d.start_attempt == 2
    # second failure waits twice as long
    pod2 = PodView("pod-2", "Failed", 1, "boom", format_time(NOW))
    d = decide_run(RunSnapshot("Running", 1, (a1, attempt(2)), pod2, POLICY), NOW)
    assert (d.state, d.retries, d.requeue_after) == ("FailureGracePeriod", 2, timedelta(seconds=20))
    # third failure exceeds max_retries=2
    a2 = attempt(2, finished=NOW, exit_code=1)
    pod3 = PodView("pod-3", "Failed", 1, "boom", format_time(NOW))
    d = decide_run(RunSnapshot("Running", 2, (a1, a2, attempt(3)), pod3, POLICY), NOW)
    assert d.state == "Failed" and d.retries == 3 and d.release_lease and d.start_attempt is None


def test_backoff_is_capped():
    assert POLICY.backoff(1) == timedelta(seconds=10)
    assert POLICY.backoff(2) == timedelta(seconds=20)
    assert POLICY.backoff(3) == timedelta(seconds=25)
    assert POLICY.backoff(500) == timedelta(seconds=25)


def test_terminal_runs_only_finish_pending_log_uploads():
    a1 = AttemptView(1, "pod-1", format_time(NOW), format_time(NOW), 0, logs_uploaded=False)
    d = decide_run(RunSnapshot("Succeeded", 0, (a1,), None, POLICY), NOW)
    assert d.state == "Succeeded" and d.upload_logs == (1,) and d.start_attempt is None


@st.composite
def run_snapshots(draw: st.DrawFn) -> RunSnapshot:
    n = draw(st.integers(0, 4))
    attempts = []
    for i in range(1, n + 1):
        last = i == n
        finished = None if last and draw(st.booleans()) else NOW - timedelta(seconds=draw(st.integers(0, 60)))
        attempts.append(attempt(i, finished=finished, exit_code=None if finished is None else (0 if last else 1)))
    pod = None
    if n and draw(st.booleans()):
        pod = PodView(
            f"pod-{n}",
            draw(st.sampled_from([None, "Pending", "Running", "Succeeded", "Failed"])),
            draw(st.sampled_from([None, 0, 1])),
            "",
            format_time(NOW),
        )
    state = draw(st.sampled_from([None, *RUN_STATES]))
    return RunSnapshot(state, draw(st.integers(0, 5)), tuple(attempts), pod, POLICY)


@given(run_snapshots(), st.integers(0, 120))
def test_run_state_is_declared_and_attempts_only_start_when_allowed(s: RunSnapshot, later: int):
    d = decide_run(s, NOW + timedelta(seconds=later))
    assert d.state in RUN_STATES
    if d.start_attempt is not None:
        assert d.state in ("Initial", "Retrying")
        assert d.retries <= POLICY.max_retries
        assert d.start_attempt == len(s.attempts) + 1
    if d.state == "Failed":
        assert d.release_lease and d.start_attempt is None


def test_a_pull_request_apply_refused_before_its_retry_fails_and_lets_the_layer_go():
    """Fault test: a pull request's apply failed its first attempt (which took the layer's Lease); during the backoff
    the pull request was merged (or moved to another head, or closed). Admission then refused every next attempt
    (`ApplyNotAllowed`) and the run waited forever in Retrying, never counting against its retries and never giving
    up the Lease: every plan, apply and drift run of the layer waited `LayerLocked` for good, after the merge too.
    Now such a refusal after an attempt ran ends the run Failed, saying why, and releases the Lease."""
    from burrito_py.controllers.run.decide import APPLY_NOT_ALLOWED, refused_for_good

    failed = attempt(1, finished=NOW - timedelta(minutes=2), exit_code=1)
    snap = RunSnapshot("Retrying", 1, (failed,), PodView("pod-1", "Failed"), POLICY, message="apply failed")
    retry = decide_run(snap, NOW)
    assert retry.start_attempt == 2 and not retry.release_lease  # what the reconcile asks admission for
    why = "pull request pr-7 is merged: nothing is applied"
    ended = refused_for_good(snap, retry, APPLY_NOT_ALLOWED, why)
    assert ended is not None and ended.state == "Failed" and ended.release_lease and ended.start_attempt is None
    succeeded = next(c for c in ended.conditions if c.type == "HasSucceeded")
    assert (succeeded.status, succeeded.message) == (False, why)
    # Stays ended: the next reconcile reads it Failed (terminal) and keeps why.
    again = decide_run(RunSnapshot("Failed", 1, (failed,), None, POLICY, message=why), NOW)
    assert again.state == "Failed" and again.start_attempt is None and again.release_lease
    # A first attempt refused so waits (the lock may not be seen yet); other refusals (a pod budget) wait too.
    first = RunSnapshot(None, 0, (), None, POLICY)
    assert refused_for_good(first, decide_run(first, NOW), APPLY_NOT_ALLOWED, why) is None
    assert refused_for_good(snap, retry, "MaxConcurrentRunnerPods", "the budget is used") is None


def test_a_pull_request_apply_that_never_started_fails_once_its_pull_request_is_merged_or_closed():
    """Fault test: an apply before merge waiting for its first pod (the layer's Lease held by another run, or the pod
    budget) when its pull request is merged or closed: admission refused it every 5 s forever, never terminal, and
    the pull request keeps its applies. A merged or closed pull request's refusal is final: it fails at once."""
    from burrito_py.controllers.run.decide import APPLY_NOT_ALLOWED, PULL_REQUEST_ENDED, refused_for_good

    first = RunSnapshot(None, 0, (), None, POLICY)
    why = "pull request pr-7 is closed: nothing is applied"
    ended = refused_for_good(first, decide_run(first, NOW), PULL_REQUEST_ENDED, why)
    assert ended is not None and ended.state == "Failed" and ended.release_lease and ended.start_attempt is None
    assert next(c for c in ended.conditions if c.type == "HasSucceeded").message == why
    # An open pull request's refusal of a first attempt still waits (the controllers' view of the lock may lag).
    assert refused_for_good(first, decide_run(first, NOW), APPLY_NOT_ALLOWED, why) is None
