"""Runs whose pod cannot be created or disappears (issue 11, items 9 and 10), decided without a cluster."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from burrito_py.controllers.layer.decide import LayerDecision
from burrito_py.controllers.layer.status import compute_status
from burrito_py.controllers.run.decide import AttemptView, PodView, RetryPolicy, RunSnapshot, decide_run
from burrito_py.controllers.run.pod_creation import (
    LONGEST_WAIT,
    PodCreation,
    backoff,
    blocked_message,
    condition,
    is_blocked_result,
    pod_surely_absent,
    wait_before_creating,
)
from burrito_py.controllers.run.reconcile import belongs_to
from burrito_py.kube.conditions import Cond
from burrito_py.kube.inventory import Inventory
from burrito_py.timeutil import format_time

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
BASE, CAP = timedelta(seconds=15), timedelta(hours=1)


def attempt(number: int = 1, started: datetime = NOW, **rest: object) -> AttemptView:
    return AttemptView(number, f"r-{number}", format_time(started), **rest)  # type: ignore[arg-type]


def test_a_refused_pod_backs_off_exponentially_and_is_capped():
    assert [backoff(n, BASE, CAP).total_seconds() for n in range(1, 7)] == [15, 30, 60, 120, 240, 300]
    assert backoff(50, BASE, CAP) == LONGEST_WAIT, "capped at five minutes, even with a one-hour grace cap"
    assert backoff(9, timedelta(seconds=1), timedelta(seconds=4)) == timedelta(seconds=4)
    record = PodCreation(2, NOW, "403 Forbidden")
    assert wait_before_creating(record, NOW + timedelta(seconds=10), BASE, CAP) == timedelta(seconds=20)
    assert wait_before_creating(record, NOW + timedelta(seconds=30), BASE, CAP) is None
    assert wait_before_creating(PodCreation(), NOW, BASE, CAP) is None


def test_a_refused_pod_is_a_condition_and_the_layers_last_result():
    record = PodCreation(3, NOW, "could not create runner pod r-1: 403 Forbidden: no serviceaccount")
    cond = condition(record, NOW + timedelta(minutes=1))
    assert cond is not None and not cond.status and cond.reason == "PodCreationFailed"
    assert "403 Forbidden: no serviceaccount" in cond.message and "3 failed creation(s)" in cond.message
    assert condition(PodCreation(), None) is None
    run = {"metadata": {"name": "r"}, "spec": {"action": "plan"},
           "status": {"state": "Initial", "podCreation": {"failures": 3, "lastFailure": format_time(NOW),
                                                          "message": record.message}}}
    message = blocked_message(run)
    assert message == f"Plan cannot start: {record.message}" and is_blocked_result(message)
    assert not is_blocked_result("Plan failed: cannot start: x") and not is_blocked_result("Plan: 1 to add")
    assert blocked_message({**run, "status": {**run["status"], "state": "Failed"}}) is None

    layer = {"metadata": {"name": "app", "namespace": "default", "annotations": {}},
             "status": {"lastResult": "Plan: 1 to add, 0 to change, 0 to destroy"}}
    run["metadata"].update(creationTimestamp=format_time(NOW))
    status = compute_status(layer, LayerDecision("Running", (), None, False), Cond("Ready", True, "Valid"), [run], NOW)
    assert status["lastResult"] == message, "the layer says why it is not running rather than just Running"


def test_a_pod_seen_deleted_fails_the_attempt_at_once():
    """Before: a pod deleted in its first 60 s left the run Running until the 10-minute resync."""
    snap = RunSnapshot("Running", 0, (attempt(started=NOW),), PodView("r-1", None, gone=True), RetryPolicy())
    decision = decide_run(snap, NOW + timedelta(seconds=5))
    assert decision.state == "FailureGracePeriod" and decision.retries == 1
    assert decision.finish is not None and "runner pod r-1 disappeared" in decision.finish.message
    assert decision.requeue_after == timedelta(seconds=15)


def test_a_pod_not_seen_yet_is_looked_at_again_when_its_appearance_grace_ends():
    snap = RunSnapshot("Running", 0, (attempt(started=NOW),), None, RetryPolicy())
    decision = decide_run(snap, NOW + timedelta(seconds=10))
    assert decision.state == "Running" and decision.requeue_after == timedelta(seconds=51)
    late = decide_run(snap, NOW + timedelta(seconds=61))
    assert late.state == "FailureGracePeriod" and late.finish is not None and "disappeared" in late.finish.message
    running = RunSnapshot("Running", 0, (attempt(started=NOW),), PodView("r-1", "Running"), RetryPolicy())
    assert decide_run(running, NOW + timedelta(seconds=10)).requeue_after is None, "a watched pod wakes its run"


def test_a_deleted_pod_is_remembered_for_its_own_run_only():
    inv = Inventory()
    pod = {"metadata": {"name": "r-1", "namespace": "default", "resourceVersion": "3",
                        "ownerReferences": [{"kind": "TerraformRun", "uid": "u-r", "controller": True}]}}
    inv.pods.observe(pod)
    inv.forget_pod(pod)
    assert inv.pods.get(("default", "r-1")) is None
    assert inv.pod_deleted("default", "r-1", {"metadata": {"name": "r", "uid": "u-r"}})
    assert not inv.pod_deleted("default", "r-1", {"metadata": {"name": "r", "uid": "another-run"}})


def test_a_late_delete_event_of_a_replaced_pod_leaves_its_successor_alone():
    """A run deletes a pod found under its attempt's name and makes its own: the create's answer may reach the
    inventory before the watch's DELETE of the old one, which must not make the new pod look gone."""
    inv = Inventory()
    owner = [{"kind": "TerraformRun", "uid": "u-r", "controller": True}]
    old = {"metadata": {"name": "r-1", "namespace": "default", "uid": "planted", "resourceVersion": "3",
                        "ownerReferences": owner}}
    new = {"metadata": {"name": "r-1", "namespace": "default", "uid": "ours", "resourceVersion": "9",
                        "ownerReferences": owner}}
    inv.pods.observe(new)
    inv.forget_pod(old)
    assert inv.pods.get(("default", "r-1")) == new
    assert not inv.pod_deleted("default", "r-1", {"metadata": {"name": "r", "uid": "u-r"}})


def test_a_pod_names_this_run_only_by_its_runs_uid_and_label():
    run = {"metadata": {"name": "r", "uid": "u-r"}}
    ours = {"metadata": {"labels": {"burrito-py.io/run": "r"},
                         "ownerReferences": [{"kind": "TerraformRun", "uid": "u-r", "controller": True}]}}
    assert belongs_to(ours, run)
    stranger = {"metadata": {"labels": {"burrito-py.io/run": "r"}}}
    assert not belongs_to(stranger, run), "a same-named pod nobody owns is not ours"
    older = {"metadata": {"labels": {"burrito-py.io/run": "r"},
                          "ownerReferences": [{"kind": "TerraformRun", "uid": "u-old", "controller": True}]}}
    assert not belongs_to(older, run), "a pod of a deleted run of the same name is not ours"


def test_the_lease_is_released_only_when_the_refused_pod_certainly_does_not_exist():
    assert pod_surely_absent(403) and pod_surely_absent(422) and pod_surely_absent(404)
    assert not pod_surely_absent(409), "a pod of that name exists"
    assert not pod_surely_absent(500) and not pod_surely_absent(0), "a lost answer: the pod may be running"
