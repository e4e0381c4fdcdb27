"""A managed-state lock bound to its run's pod (docs/architecture.md §10.6): released only when that pod is gone or
has ended, never while it may still run terraform."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.controllers.run.state_lock import managed, orphaned

LOCK = {"id": "lock-1", "run": "app-apply-1", "attempt": 1, "pod": "app-apply-1-1", "podUid": "uid-1"}


def pod(uid: str = "uid-1", phase: str | None = "Running", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "app-apply-1-1", "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-26T23:00:00Z"
    return {"metadata": meta, "status": {"phase": phase} if phase else {}}


def test_a_lock_whose_pod_is_gone_or_ended_is_orphaned() -> None:
    assert orphaned(LOCK, None) == "its runner pod app-apply-1-1 is gone"
    assert "now has another uid" in str(orphaned(LOCK, pod(uid="uid-2")))
    assert orphaned(LOCK, pod(phase="Failed")) == "its runner pod app-apply-1-1 has ended (Failed)"
    assert orphaned(LOCK, pod(phase="Succeeded")) is not None


@pytest.mark.parametrize("phase", ["Pending", "Running", "Unknown", None])
def test_a_live_pods_lock_is_never_taken(phase: str | None) -> None:
    assert orphaned(LOCK, pod(phase=phase)) is None
    assert orphaned(LOCK, pod(phase=phase, deleting=True)) is None  # terminating: terraform may still run


def test_a_pod_stopped_at_its_deadline_keeps_its_lock_until_its_container_has_stopped() -> None:
    stopping = pod(phase="Failed")
    stopping["status"] |= {"reason": "DeadlineExceeded", "containerStatuses": [
        {"name": "runner", "state": {"running": {"startedAt": "2026-11-26T21:00:00Z"}}}]}
    assert orphaned(LOCK, stopping) is None  # Terraform is still stopping, and still holds the state
    stopping["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 143}}
    assert orphaned(LOCK, stopping) == "its runner pod app-apply-1-1 has ended (Failed)"
    # Failed for another reason, a stale `running` state (its node lost) does not hold the lock for good.
    lost = pod(phase="Failed")
    lost["status"] |= {"reason": "NodeLost", "containerStatuses": [{"name": "runner", "state": {"running": {}}}]}
    assert orphaned(LOCK, lost) == "its runner pod app-apply-1-1 has ended (Failed)"


def test_a_lock_no_runner_pod_took_is_left_alone() -> None:
    assert orphaned(None, None) is None
    assert orphaned({**LOCK, "pod": "", "podUid": ""}, None) is None  # an admin's lock
    assert orphaned({**LOCK, "podUid": ""}, None) is None


@given(uid=st.sampled_from(["uid-1", "uid-2"]), phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed",
                                                                       "Unknown", None]), exists=st.booleans())
def test_released_only_when_the_locking_pod_cannot_run_terraform(uid: str, phase: str | None, exists: bool) -> None:
    reason = orphaned(LOCK, pod(uid, phase) if exists else None)
    live = exists and uid == "uid-1" and phase not in ("Succeeded", "Failed")
    assert (reason is None) == live


def test_managed_is_the_layers_else_the_repositorys() -> None:
    assert managed({"spec": {"state": {"managed": True}}}, None)
    assert managed({"spec": {}}, {"spec": {"state": {"managed": True}}})
    assert not managed({"spec": {"state": {"managed": False}}}, {"spec": {"state": {"managed": True}}})
    assert not managed({"spec": {}}, None)
