"""burrito's TerraformRun controller test cases (internal/controllers/terraformrun/controller_test.go and its
testdata), translated to our decision functions: `decide_run` (states, retries, Lease release),
`lease_verdict` (the lock), `pod_budget_allows` (maxConcurrentRunnerPods). burrito's RequeueAfter values
are polling intervals; we watch pods, so where burrito asserts a requeue we assert what wakes the run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from burrito_py.controllers.layer.sync_windows import pod_budget_allows
from burrito_py.controllers.run.decide import AttemptView, PodView, RetryPolicy, RunSnapshot, decide_run
from burrito_py.controllers.run.lease_decisions import LeaseVerdict, lease_verdict
from burrito_py.timeutil import format_time

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(max_retries=1, grace_base=timedelta(seconds=15), grace_cap=timedelta(hours=1))


def attempt(number: int, started: datetime, finished: datetime | None = None, code: int | None = None) -> AttemptView:
    return AttemptView(number, f"run-{number}", format_time(started),
                       format_time(finished) if finished else None, code, finished is not None)


def test_nominal_a_created_run_starts_its_first_pod():
    """Nominal Case / When a TerraformRun is created: Initial, a runner pod, a lock on the layer.

    We differ on purpose: our run stays `Initial` only until its pod is created in the same reconcile, then
    shows `Running` (the pod exists); the Lease is taken just before the pod, in that reconcile."""
    decision = decide_run(RunSnapshot(None, 0, (), None, POLICY), NOW)
    assert decision.state == "Initial" and decision.start_attempt == 1 and not decision.release_lease


def test_nominal_a_run_with_a_running_pod_creates_no_new_pod_and_keeps_the_lock():
    """Nominal Case / When a TerraformRun is running its initial pod: Running, lock kept, still one pod.

    burrito requeues after WaitAction to poll the pod; a watched pod's events wake ours (no requeue)."""
    snap = RunSnapshot("Running", 0, (attempt(1, NOW),), PodView("run-1", "Running"), POLICY)
    decision = decide_run(snap, NOW + timedelta(seconds=5))
    assert decision.state == "Running" and decision.start_attempt is None and not decision.release_lease
    assert decision.requeue_after is None


def test_nominal_a_completed_pod_makes_the_run_succeeded_and_releases_the_lock():
    """Nominal Case / When a running TerraformRun has a completed pod: Succeeded, lock released, no new pod."""
    snap = RunSnapshot("Running", 0, (attempt(1, NOW),), PodView("run-1", "Succeeded", 0), POLICY)
    decision = decide_run(snap, NOW + timedelta(seconds=30))
    assert decision.state == "Succeeded" and decision.release_lease and decision.start_attempt is None
    assert decision.upload_logs == (1,), "and its log is collected"


def test_nominal_an_already_succeeded_run_does_nothing_more():
    """Nominal Case / When TerraformRun is already succeeded: Succeeded, no requeue, no pod running."""
    snap = RunSnapshot("Succeeded", 0, (attempt(1, NOW, NOW, 0),), None, POLICY)
    decision = decide_run(snap, NOW + timedelta(hours=1))
    assert decision.state == "Succeeded" and decision.start_attempt is None and decision.requeue_after is None


def test_error_a_failed_pod_within_the_grace_period_waits_and_keeps_the_lock():
    """Error Case / When a TerraformRun has errored once and still in grace period: FailureGracePeriod, lock
    kept. burrito requeues after WaitAction; we requeue exactly at the end of the backoff."""
    snap = RunSnapshot("Running", 0, (attempt(1, NOW),), PodView("run-1", "Failed", 1, "boom"), POLICY)
    decision = decide_run(snap, NOW + timedelta(seconds=1))
    assert decision.state == "FailureGracePeriod" and decision.retries == 1
    assert not decision.release_lease and decision.start_attempt is None
    assert decision.requeue_after is not None and decision.requeue_after <= timedelta(seconds=15)


def test_error_after_the_grace_period_a_second_pod_is_started_and_the_lock_kept():
    """Error Case / When a TerraformRun has errored once and not in grace period anymore: Retrying, a second
    pod, lock kept."""
    earlier = NOW - timedelta(hours=1)
    snap = RunSnapshot("FailureGracePeriod", 1, (attempt(1, earlier, earlier, 1),), None, POLICY)
    decision = decide_run(snap, NOW)
    assert decision.state == "Retrying" and decision.start_attempt == 2 and not decision.release_lease


def test_error_the_retry_limit_fails_the_run_releases_the_lock_and_starts_no_pod():
    """Error Case / When a TerraformRun has reached its max retry limit: Failed, lock released, no new pod."""
    earlier = NOW - timedelta(hours=1)
    snap = RunSnapshot("Running", 1, (attempt(1, earlier, earlier, 1), attempt(2, NOW)),
                       PodView("run-2", "Failed", 1, "boom"), POLICY)
    decision = decide_run(snap, NOW + timedelta(seconds=5))
    assert decision.state == "Failed" and decision.release_lease and decision.start_attempt is None


def test_error_unknown_layer_or_repository_is_not_an_error_loop():
    """Error Case / unknown layer, layer with an unknown repo, unknown revision: burrito returns an error and
    requeues after OnError. We differ on purpose: a run whose layer is gone is left to garbage collection
    (its owner reference), and a layer's missing repository is the layer's Ready condition; the run decision
    itself never depends on them, so a fresh run still asks for its first attempt."""
    assert decide_run(RunSnapshot(None, 0, (), None, POLICY), NOW).start_attempt == 1


def test_concurrent_a_run_of_a_locked_layer_waits_and_creates_no_pod():
    """Concurrent case / When another TerraformRun is already running on the same layer: Initial, the lock
    not released, no pod. Our Lease verdict for a live holder is WAIT (the run shows Admitted=False,
    LayerLocked, and re-checks every 5 s)."""
    lease = {"spec": {"holderIdentity": "other-run"}}
    assert lease_verdict(lease, "this-run", "Running", True) is LeaseVerdict.WAIT


def test_parallel_max_concurrent_runner_pods_2_admits_2_of_3():
    """Parallel case / When 3 layers are running with maxConcurrentRunnerPods set to 2: only 2 runner pods."""
    admitted = 0
    for _ in range(3):
        if pod_budget_allows(admitted, 2).allowed:
            admitted += 1
    assert admitted == 2


def test_parallel_without_a_limit_every_layer_gets_its_pod():
    """Parallel case / When 3 layers are running without a maxConcurrentRunnerPods configuration: 3 pods."""
    admitted = 0
    for _ in range(3):
        if pod_budget_allows(admitted, None).allowed:
            admitted += 1
    assert admitted == 3


def test_parallel_the_controller_wide_limit_counts_every_repository():
    """burrito's controller.maxConcurrentRunnerPods (config), next to the repository's: 3 layers of 3
    repositories with a controller-wide limit of 2 get 2 pods."""
    admitted = 0
    for _ in range(3):
        if pod_budget_allows(0, None, active_total=admitted, max_total=2).allowed:
            admitted += 1
    assert admitted == 2
