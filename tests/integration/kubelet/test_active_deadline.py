"""The local kubelet enforces a `restartPolicy: Never` pod's `activeDeadlineSeconds` as a node does
(docs/architecture.md §22, "Deadline"; the run controller's runner timeouts, §6.1, rely on it): past it, its container
gets SIGTERM and the grace period, and once it has stopped the pod is `Failed` with the kubelet's reason
`DeadlineExceeded` and the container's final state (a kubelet reports no terminal phase while a container may still
run: its status manager's `mergePodStatus` holds the phase back); a pod that never started its process is `Failed` at
once and never starts."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from tests.support.emulator import wait_for

from .test_graceful_deletion import GRACEFUL, PODS, Node, node

__all__ = ["node"]  # the fixture


def create(node: Node, name: str, code: str, deadline: int, **container: Any) -> None:
    body = {"metadata": {"name": name}, "spec": {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 5, "activeDeadlineSeconds": deadline,
        "containers": [{"name": "main", "image": "none", "command": [sys.executable, "-c", textwrap.dedent(code)],
                        **container}]}}
    response = node.http.post(PODS, json=body)
    assert response.status_code == 201, response.text


def ended(node: Node, name: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        pod = node.pod(name) or {}
        states = [c.get("state") or {} for c in (pod.get("status") or {}).get("containerStatuses") or ()]
        return pod if states and all("terminated" in s for s in states) else None

    return wait_for(found, 30, 0.05, f"{name}'s container to end")


def test_a_pod_past_its_deadline_is_stopped_gracefully_then_fails(node: Node, tmp_path: Path) -> None:
    marker = tmp_path / "sigterm"
    # Three seconds to stop after SIGTERM (within the grace period of 5): room to look at the pod meanwhile.
    create(node, "slow", GRACEFUL.replace("time.sleep(1.0)", "time.sleep(3.0)").format(marker=str(marker)), deadline=2)
    started = time.monotonic()
    running = node.running("slow")
    assert running["status"]["phase"] == "Running"
    wait_for(marker.exists, 30, 0.02, "SIGTERM at its deadline")
    assert time.monotonic() - started >= 1.9, "not before its deadline"
    # Its process is still stopping: the pod is still Running, its container running.
    stopping = node.pod("slow")
    assert stopping is not None
    assert stopping["status"]["phase"] == "Running", stopping["status"]
    assert "reason" not in stopping["status"]
    assert "running" in stopping["status"]["containerStatuses"][0]["state"]
    final = ended(node, "slow")
    assert marker.read_text() == "SIGTERM", "stopped with SIGTERM first, as on a deletion"
    status = final["status"]
    # It exited 0 in its grace period, and is Failed all the same: its deadline passed.
    assert (status["phase"], status["reason"], status["message"]) == (
        "Failed", "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"), status
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert final["metadata"].get("deletionTimestamp") is None, "failed, not deleted"


def test_a_pod_that_never_started_fails_at_its_deadline_and_never_starts(node: Node, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    create(node, "waiting", f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')", deadline=2,
           env=[{"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "later", "key": "key"}}}])
    failed = wait_for(lambda: (p := node.pod("waiting")) and p["status"].get("phase") == "Failed" and p, 30, 0.05,
                      "the unstarted pod failed at its deadline")
    assert failed["status"]["reason"] == "DeadlineExceeded"
    secret = {"metadata": {"name": "later"}, "stringData": {"key": "v"}}
    assert node.http.post("/api/v1/namespaces/default/secrets", json=secret).status_code == 201
    time.sleep(3)
    assert not marker.exists(), "a pod past its deadline never starts"
    assert node.pod("waiting")["status"]["phase"] == "Failed"  # type: ignore[index]
