"""A runner pod that runs longer than its timeout (docs/architecture.md §6.1): its pod carries the plan or apply
timeout as activeDeadlineSeconds; once its kubelet stopped it (`DeadlineExceeded`) and its container is gone, the
attempt fails and the run is not retried (`TimedOut`). A pod still there well after its deletion's grace period
keeps its attempt and says why (`RunnerPodStopped`). Decided without a cluster."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from burrito_py.controllers.run.decide import (
    STOP_MARGIN,
    STOP_OVERDUE,
    STOPPED_CONDITION,
    TIMED_OUT,
    AttemptView,
    PodView,
    RetryPolicy,
    RunSnapshot,
    decide_run,
)
from burrito_py.controllers.run.reconcile import pod_view
from burrito_py.controllers.run.runner_pod import RunnerDefaults, build_runner_pod
from burrito_py.timeutil import format_time

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(max_retries=3)
RUN = {"metadata": {"name": "r", "namespace": "team", "uid": "run-uid"}, "spec": {"action": "plan"}}
LAYER = {"metadata": {"name": "app", "namespace": "team"}}
KILLED = "interrupted by SIGTERM: terraform apply was stopped"


def snapshot(pod: PodView | None, state: str = "Running", reason: str = "", message: str = "") -> RunSnapshot:
    return RunSnapshot(state, 0, (AttemptView(1, "r-1", format_time(NOW - timedelta(hours=2))),), pod, POLICY,
                       message=message, reason=reason)


def deadline_pod(running: bool, **rest: Any) -> PodView:
    return PodView("r-1", "Failed", uid="u-1", reason="DeadlineExceeded", running=running, deadline_seconds=7200,
                   **rest)


def succeeded_condition(decision: Any) -> Any:
    return next(c for c in decision.conditions if c.type == "HasSucceeded")


@pytest.mark.parametrize(("action", "seconds"), [("plan", 7200), ("apply", 86400), ("import", 86400),
                                                 ("migrate-state", 86400)])
def test_a_runner_pod_carries_its_actions_timeout_as_its_active_deadline(action: str, seconds: int) -> None:
    defaults = RunnerDefaults("img", "sa", "https://ds", plan_timeout_seconds=7200, apply_timeout_seconds=86400)
    pod = build_runner_pod({**RUN, "spec": {"action": action}}, LAYER, 1, defaults)
    assert pod["spec"]["activeDeadlineSeconds"] == seconds


def test_no_timeout_means_no_active_deadline_and_no_override_sets_one() -> None:
    pod = build_runner_pod(RUN, LAYER, 1, RunnerDefaults("img", "sa", "https://ds"))
    assert "activeDeadlineSeconds" not in pod["spec"]
    hostile = build_runner_pod(RUN, LAYER, 1, RunnerDefaults("img", "sa", "https://ds", plan_timeout_seconds=60),
                               {"activeDeadlineSeconds": 10**9})
    assert hostile["spec"]["activeDeadlineSeconds"] == 60


def test_the_pod_view_reads_the_kubelets_reason_the_deadline_and_whether_a_container_still_runs() -> None:
    body = {"metadata": {"name": "r-1", "uid": "u-1"}, "spec": {"activeDeadlineSeconds": 7200},
            "status": {"phase": "Failed", "reason": "DeadlineExceeded",
                       "message": "Pod was active on the node longer than the specified deadline",
                       "containerStatuses": [{"name": "runner", "state": {"running": {"startedAt": "x"}}}]}}
    view = pod_view(body, RUN)
    assert view is not None and view.reason == "DeadlineExceeded" and view.running and view.deadline_seconds == 7200
    body["status"]["containerStatuses"] = [{"name": "runner", "state": {"terminated": {"exitCode": 143}}}]
    view = pod_view(body, RUN)
    assert view is not None and not view.running and view.exit_code == 143


def test_a_pod_stopped_at_its_deadline_ends_its_attempt_only_once_its_container_is_gone() -> None:
    stopping = decide_run(snapshot(deadline_pod(running=True)), NOW)
    assert stopping.state == "Running" and stopping.finish is None and not stopping.release_lease


def test_only_a_deadline_stop_waits_for_its_container_a_pod_failed_otherwise_ends_at_once() -> None:
    """A pod Failed for another reason (its node lost, the local kubelet restarted under it) may keep a `running`
    container state nobody will update: its attempt ends, as before, rather than waiting for good."""
    lost = PodView("r-1", "Failed", uid="u-1", reason="NodeLost", running=True)
    decision = decide_run(snapshot(lost), NOW)
    assert decision.finish is not None and not decision.finish.timed_out and decision.state == "FailureGracePeriod"


def test_a_timed_out_attempt_fails_the_run_without_a_retry_saying_why() -> None:
    decision = decide_run(snapshot(deadline_pod(running=False, exit_code=143, message=KILLED)), NOW)
    assert decision.state == "Failed" and decision.start_attempt is None and decision.release_lease
    assert decision.finish is not None and decision.finish.timed_out and decision.finish.exit_code == 143
    assert decision.message == f"runner pod r-1 ran longer than its timeout of 2h and was stopped: {KILLED}"
    cond = succeeded_condition(decision)
    assert (cond.status, cond.reason, cond.message) == (False, TIMED_OUT, decision.message)
    # A pod that never got to run its runner (stopped while waiting for its image) says so without a message.
    never = decide_run(snapshot(deadline_pod(running=False)), NOW)
    assert never.state == "Failed"
    assert never.message == "runner pod r-1 ran longer than its timeout of 2h and was stopped"


def test_the_ended_run_keeps_its_timed_out_reason() -> None:
    decided = decide_run(snapshot(None, "Failed", TIMED_OUT, "runner pod r-1 ran longer …"), NOW)
    assert succeeded_condition(decided).reason == TIMED_OUT


def test_only_the_kubelets_deadline_counts_a_runner_that_exits_by_itself_is_retried() -> None:
    failed = decide_run(snapshot(PodView("r-1", "Failed", 1, "boom", uid="u-1", deadline_seconds=7200)), NOW)
    assert failed.state == "FailureGracePeriod" and not (failed.finish and failed.finish.timed_out)
    assert succeeded_condition(failed).reason == "RunFailed"


def test_a_pod_still_there_well_after_its_grace_period_keeps_its_attempt_and_says_why() -> None:
    until = NOW - timedelta(minutes=1)
    lost = PodView("r-1", "Running", uid="u-1", deleting=True, deleting_until=format_time(until), node="node-7",
                   running=True)
    soon = decide_run(snapshot(lost), NOW)  # within the margin: a kubelet may still be confirming
    assert soon.state == "Running" and not any(c.type == STOPPED_CONDITION for c in soon.conditions)
    assert soon.requeue_after == STOP_MARGIN - timedelta(minutes=1) + timedelta(seconds=1)
    later = decide_run(snapshot(lost), until + STOP_MARGIN)
    assert later.state == "Running" and later.finish is None and not later.release_lease, "Terraform may still run"
    cond = next(c for c in later.conditions if c.type == STOPPED_CONDITION)
    assert (cond.status, cond.reason) == (False, STOP_OVERDUE)
    assert cond.message.startswith(f"runner pod r-1 on node node-7 was to be stopped by {format_time(until)} and "
                                   "is still there: its node may be unreachable."), cond.message
    assert "--force --grace-period=0" in cond.message
    # Once it is gone (forced, or its node came back), the attempt ends as any deleted pod's.
    gone = decide_run(snapshot(PodView("r-1", None, gone=True)), until + STOP_MARGIN)
    assert gone.finish is not None and not any(c.type == STOPPED_CONDITION for c in gone.conditions)
