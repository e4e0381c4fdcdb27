"""A runner pod that never starts (docs/architecture.md §6.1): the run says why, and past the start timeout the pod
is deleted and its attempt fails once the pod is gone, never earlier. Decided without a cluster."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.controllers.run.decide import (
    ACTIVE_POD_PHASES,
    STARTED_CONDITION,
    AttemptView,
    PodView,
    RetryPolicy,
    RunSnapshot,
    decide_run,
)
from burrito_py.controllers.run.reconcile import attempt_views, pod_view
from burrito_py.timeutil import format_time

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(max_retries=1, start_timeout=timedelta(minutes=10))
PULL = ("ImagePullBackOff", 'Back-off pulling image "registry.example/runner:9"')
GIVEN_UP = ("runner pod r-1 did not start within 10m "
            '(ImagePullBackOff: Back-off pulling image "registry.example/runner:9")')


def attempt(not_started: str | None = None) -> AttemptView:
    return AttemptView(1, "r-1", format_time(NOW), not_started=not_started)


def pending(**rest: Any) -> PodView:
    return PodView("r-1", "Pending", started=False, waiting=PULL, uid="u-1", **rest)


def snapshot(pod: PodView | None, given_up: str | None = None, policy: RetryPolicy = POLICY) -> RunSnapshot:
    return RunSnapshot("Running", 0, (attempt(given_up),), pod, policy)


RUN = {"metadata": {"name": "r", "uid": "run-uid"}}
OWNED = {"ownerReferences": [{"kind": "TerraformRun", "uid": "run-uid", "controller": True}],
         "labels": {ann.LABEL_RUN: "r"}}


def started_condition(decision: Any) -> Any:
    return next((c for c in decision.conditions if c.type == STARTED_CONDITION), None)


def test_the_pod_view_reads_why_a_pod_has_not_started():
    pulling = {"metadata": {"name": "r-1", "uid": "u-1", **OWNED}, "status": {"phase": "Pending", "containerStatuses": [
        {"name": "runner", "state": {"waiting": {"reason": PULL[0], "message": PULL[1]}}}]}}
    view = pod_view(pulling, RUN)
    assert view is not None and not view.started and view.waiting == PULL and view.uid == "u-1"
    assert not view.deleting and view.owned
    assert not pod_view({**pulling, "metadata": {"name": "r-1", "uid": "u-1"}}, RUN).owned  # type: ignore[union-attr]
    unscheduled = {"metadata": {"name": "r-1", "deletionTimestamp": format_time(NOW)}, "status": {
        "phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                            "message": "0/1 nodes are available: 1 node(s) didn't match selector."}]}}
    view = pod_view(unscheduled, RUN)
    assert view is not None and view.waiting == ("Unschedulable", "0/1 nodes are available: 1 node(s) didn't match "
                                                 "selector.") and view.deleting and not view.started
    running = {"metadata": {"name": "r-1"}, "status": {"phase": "Running", "containerStatuses": [
        {"name": "runner", "state": {"running": {"startedAt": format_time(NOW)}}}]}}
    assert pod_view(running, RUN).started  # type: ignore[union-attr]
    # Pending while its container already runs (the kubelet has not written the phase yet): started.
    early = {"metadata": {"name": "r-1"}, "status": {"phase": "Pending", "containerStatuses": [
        {"name": "runner", "state": {"running": {"startedAt": format_time(NOW)}}}]}}
    assert pod_view(early, RUN).started  # type: ignore[union-attr]
    long_message = {"metadata": {"name": "r-1"}, "status": {"phase": "Pending", "containerStatuses": [
        {"name": "runner", "state": {"waiting": {"reason": "ErrImagePull", "message": "x" * 2000}}}]}}
    assert len(pod_view(long_message, RUN).waiting[1]) == 300  # type: ignore[union-attr,index]
    assert attempt_views({"attempts": [{"number": 1, "podName": "r-1", "notStarted": GIVEN_UP}]})[0].not_started \
        == GIVEN_UP


def test_before_its_timeout_the_run_says_why_its_pod_waits_and_looks_again_at_the_timeout():
    decision = decide_run(snapshot(pending()), NOW + timedelta(minutes=3))
    assert decision.state == "Running" and decision.give_up is None and decision.finish is None
    cond = started_condition(decision)
    assert cond is not None and cond.status is False and cond.reason == "ImagePullBackOff"
    assert PULL[1] in cond.message and format_time(NOW + timedelta(minutes=10)) in cond.message
    assert decision.requeue_after == timedelta(minutes=7, seconds=1)


def test_at_its_timeout_the_pod_is_given_up_but_the_attempt_goes_on_until_the_pod_is_gone():
    decision = decide_run(snapshot(pending()), NOW + timedelta(minutes=10))
    assert decision.give_up is not None and decision.give_up.record
    assert (decision.give_up.pod_name, decision.give_up.pod_uid, decision.give_up.message) == ("r-1", "u-1", GIVEN_UP)
    # Nothing ends yet: no next attempt and no Lease released while the pod might still start.
    assert decision.state == "Running" and decision.finish is None
    assert decision.start_attempt is None and not decision.release_lease
    cond = started_condition(decision)
    assert cond is not None and cond.reason == "StartTimeout" and cond.message == f"{GIVEN_UP}: deleting it"


def test_a_given_up_pod_is_deleted_again_until_its_deletion_is_seen():
    again = decide_run(snapshot(pending(), GIVEN_UP), NOW + timedelta(minutes=11))
    assert again.give_up is not None and not again.give_up.record, "the event and the record are said once"
    deleting = decide_run(snapshot(pending(deleting=True), GIVEN_UP), NOW + timedelta(minutes=11))
    assert deleting.give_up is None and deleting.state == "Running" and deleting.finish is None
    assert started_condition(deleting).reason == "StartTimeout"  # type: ignore[union-attr]


def test_once_the_given_up_pod_is_gone_its_attempt_fails_for_the_reason_it_was_given_up():
    gone = PodView("r-1", None, gone=True)
    decision = decide_run(snapshot(gone, GIVEN_UP), NOW + timedelta(minutes=11))
    assert decision.finish is not None and not decision.finish.succeeded and decision.finish.message == GIVEN_UP
    assert decision.state == "FailureGracePeriod" and decision.retries == 1
    assert started_condition(decision) is None
    last = RunSnapshot("Running", 1, (attempt(GIVEN_UP),), gone, POLICY)
    failed = decide_run(last, NOW + timedelta(minutes=11))
    assert failed.state == "Failed" and failed.release_lease and failed.message == GIVEN_UP
    # Gone while the controllers were down (no DELETE seen): the same message, not "disappeared".
    unseen = decide_run(snapshot(None, GIVEN_UP), NOW + timedelta(minutes=11))
    assert unseen.finish is not None and unseen.finish.message == GIVEN_UP
    # Stopped by the kubelet before it ran: the reason it was given up; ran after all: what it said.
    stopped = decide_run(snapshot(PodView("r-1", "Failed"), GIVEN_UP), NOW + timedelta(minutes=11))
    assert stopped.finish is not None and stopped.finish.message == GIVEN_UP
    ran = decide_run(snapshot(PodView("r-1", "Failed", 1, "Error: boom"), GIVEN_UP), NOW + timedelta(minutes=11))
    assert ran.finish is not None and ran.finish.message == "Error: boom"


def test_a_pod_that_is_not_the_runs_own_is_never_deleted():
    """Whatever names it as the attempt's pod (a status written by someone else), a pod without the run's owner
    reference and label is only waited for: the controllers delete no pod but their own runner pods."""
    stranger = PodView("r-1", "Pending", started=False, waiting=PULL, uid="u-9", owned=False)
    for given_up in (None, GIVEN_UP):
        decision = decide_run(snapshot(stranger, given_up), NOW + timedelta(hours=1))
        assert decision.give_up is None and decision.finish is None and decision.state == "Running"


def test_a_started_pod_is_never_given_up_however_long_it_runs():
    for pod in (PodView("r-1", "Running", uid="u-1"), PodView("r-1", "Pending", started=True, uid="u-1")):
        decision = decide_run(snapshot(pod), NOW + timedelta(hours=5))
        assert decision.give_up is None and started_condition(decision) is None and decision.state == "Running"


def test_without_a_timeout_the_pod_waits_for_good_and_still_says_why():
    decision = decide_run(snapshot(pending(), policy=RetryPolicy(start_timeout=timedelta(0))), NOW + timedelta(days=3))
    assert decision.give_up is None and decision.requeue_after is None
    assert started_condition(decision).reason == "ImagePullBackOff"  # type: ignore[union-attr]


def test_a_pod_on_its_way_costs_no_status_write_until_its_timeout_passes():
    """Every pod is briefly unscheduled or ContainerCreating: no condition then (it would be two more status writes
    for every attempt), but the timeout still holds and, if it passes, names where the pod was stuck."""
    for pod in (PodView("r-1", None, started=False), PodView("r-1", "Pending", started=False, waiting=(
            "ContainerCreating", "")), PodView("r-1", "Pending", started=False, waiting=("not a reason!", "x"))):
        decision = decide_run(snapshot(pod), NOW + timedelta(seconds=2))
        assert started_condition(decision) is None and decision.give_up is None
        assert decision.requeue_after == timedelta(minutes=10, seconds=-1)
    late = decide_run(snapshot(PodView("r-1", "Pending", started=False, waiting=("ContainerCreating", ""))),
                      NOW + timedelta(minutes=10))
    assert late.give_up is not None and late.give_up.message == (
        "runner pod r-1 did not start within 10m (ContainerCreating)")
    bare = decide_run(snapshot(PodView("r-1", None, started=False)), NOW + timedelta(minutes=10))
    assert bare.give_up is not None and bare.give_up.message.endswith("(not scheduled or started yet)")
    # A reason the API would refuse in a condition is never copied into one.
    odd = decide_run(snapshot(PodView("r-1", "Pending", started=False, waiting=("not a reason!", "x"))),
                     NOW + timedelta(minutes=10))
    assert started_condition(odd).reason == "StartTimeout"  # type: ignore[union-attr]


@st.composite
def waiting_snapshots(draw: st.DrawFn) -> tuple[RunSnapshot, datetime]:
    given_up = draw(st.sampled_from([None, GIVEN_UP]))
    pod = draw(st.one_of(st.none(), st.builds(
        PodView, st.sampled_from(["r-1", "r-0"]), st.sampled_from([None, "Pending", "Running", "Succeeded", "Failed"]),
        st.sampled_from([None, 0, 1]), gone=st.booleans(), started=st.booleans(),
        waiting=st.sampled_from([None, PULL]), uid=st.sampled_from([None, "u-1"]), deleting=st.booleans(),
        owned=st.booleans(), reason=st.sampled_from(["", "DeadlineExceeded"]), running=st.booleans(),
        deadline_seconds=st.sampled_from([None, 7200]), deleting_until=st.sampled_from([None, format_time(NOW)]))))
    policy = RetryPolicy(max_retries=draw(st.integers(0, 2)),
                         start_timeout=timedelta(seconds=draw(st.sampled_from([0, 30, 600]))))
    snap = RunSnapshot("Running", draw(st.integers(0, 3)), (attempt(given_up),), pod, policy)
    return snap, NOW + timedelta(seconds=draw(st.integers(0, 3600)))


@given(waiting_snapshots())
def test_nothing_overlaps_a_pod_that_may_still_start(case: tuple[RunSnapshot, datetime]):
    snap, now = case
    decision = decide_run(snap, now)
    pod = snap.pod
    alive = pod is not None and pod.name == "r-1" and not pod.gone and (pod.phase in (None, *ACTIVE_POD_PHASES)
                                                                         or pod.stopping)
    if alive:  # the latest attempt's pod is there and has not ended (or still stops): wait for it, whatever else holds
        assert decision.finish is None and decision.start_attempt is None and not decision.release_lease
    assert decision.requeue_after is None or decision.requeue_after > timedelta(0), "never a busy loop"
    if decision.give_up is not None:
        assert alive and pod is not None and not pod.started and pod.owned and decision.give_up.pod_name == "r-1"
        assert decision.give_up.record == (snap.attempts[-1].not_started is None)
        assert not (pod.deleting and not decision.give_up.record)
