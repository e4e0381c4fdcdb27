"""A runner that hangs (docs/architecture.md §6.1), on the real control plane with the local kubelet as its Node.
Before, an apply stuck in a provisioner held its run Running, and its layer's Lease, for good: nothing stopped it
but a person deleting the pod. Now its pod carries the apply timeout as activeDeadlineSeconds: the kubelet stops it
(SIGTERM: the runner interrupts Terraform, which saves its state), and the run fails, once the runner is gone, with
reason TimedOut and no retry."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from kubernetes import client
from prometheus_client import REGISTRY

from burrito_py.api import annotations as ann
from tests.support.emulator import wait_for
from tests.support.git_repos import make_repo
from tests.support.real_cluster import RealCluster

from ..conftest import running_platform
from .test_fault_killed_apply import container_processes
from .test_fault_runner_pod_start import condition, events

HANGING_TF = """
terraform {
  backend "local" {}
}

resource "terraform_data" "hangs" {
  input = "once"

  provisioner "local-exec" {
    command = "sleep 600"
  }
}
"""


def test_a_hung_apply_is_stopped_at_its_timeout_and_its_run_fails_without_a_retry(
        tmp_path: Path, real_cluster: RealCluster) -> None:
    repo = make_repo(tmp_path / "upstream")
    repo.commit({"layers/app/main.tf": HANGING_TF}, "a provisioner that never ends")
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", cluster=real_cluster,
                          runner_apply_timeout=timedelta(seconds=15)) as platform:
        platform.create_repository("repo", repo.url)
        platform.create_layer("app", "repo", "layers/app", auto_apply=True,
                              remediation={"onError": {"maxRetries": 2}})

        def apply_run() -> dict[str, Any] | None:
            return next((r for r in platform.runs("app") if r["spec"]["action"] == "apply"), None)

        run = wait_for(apply_run, 120, interval=0.2, what="the apply run")
        name = run["metadata"]["name"]
        pod = wait_for(lambda: next((p for p in platform.pods("app") if p.metadata.labels.get(ann.LABEL_RUN) == name
                                     and p.status.phase == "Running"), None), 60, interval=0.2,
                       what="the apply's runner pod running")
        assert pod.spec.active_deadline_seconds == 15
        plans = [p for p in platform.pods("app") if p.metadata.labels.get(ann.LABEL_RUN) != name]
        assert plans and all(p.spec.active_deadline_seconds == 7200 for p in plans), "the plan timeout: 2h"
        started = time.monotonic()

        # The run ends only once the runner's processes are gone: never while Terraform still stops.
        def ended() -> dict[str, Any] | None:
            body = apply_run()
            return body if body and (body.get("status") or {}).get("state") in ("Failed", "Succeeded") else None

        failed = wait_for(ended, 120, interval=0.05, what="the timed-out apply run to end")
        assert container_processes(name) == [], "the run ended while its runner still ran"
        assert time.monotonic() - started >= 5, "stopped at its deadline, not at once"
        status = failed["status"]
        assert status["state"] == "Failed" and len(status["attempts"]) == 1, "no retry"
        succeeded = condition(failed, "HasSucceeded")
        assert succeeded is not None and succeeded["reason"] == "TimedOut", succeeded
        prefix = f"runner pod {status['attempts'][0]['podName']} ran longer than its timeout of 15s and was stopped"
        assert succeeded["message"].startswith(prefix), succeeded
        assert "interrupted by SIGTERM" in succeeded["message"], succeeded
        stopped = platform.core.read_namespaced_pod(status["attempts"][0]["podName"], platform.namespace)
        assert (stopped.status.phase, stopped.status.reason) == ("Failed", "DeadlineExceeded")
        assert any(prefix in m for m in events(platform, name, "AttemptFailed"))
        assert REGISTRY.get_sample_value("burrito_py_runner_timeouts_total",
                                         {"namespace": platform.namespace, "action": "apply"}) == 1.0
        leases = client.CoordinationV1Api(platform.core.api_client).list_namespaced_lease(platform.namespace).items
        assert all(lease.spec.holder_identity != name for lease in leases), "the layer's Lease is released"
        # Terraform was interrupted, not killed: it saved what it had, the resource marked tainted.
        state = platform.state_file("app").read_text()
        assert '"status": "tainted"' in state, state
        # The layer applies it no more on its own, and says why (until a new commit, sync-now or an approval). The
        # condition is already there, False, from before the run ended: wait for the layer's pass that saw the end.
        def reached() -> dict[str, Any] | None:
            found = condition(platform.layer("app"), "HasLastRunReachedRetryLimit")
            return found if found is not None and found["status"] == "True" else None

        limit = wait_for(reached, 30, interval=0.2, what="the layer's retry-limit condition to be True")
        assert (limit["status"], limit["reason"]) == ("True", "TimedOut"), limit
        assert limit["message"].startswith(f"run {name} was stopped at its timeout, not retried: {prefix}"), limit
        time.sleep(3)
        assert len(apply_run()["status"]["attempts"]) == 1, "still no retry"  # type: ignore[index]
        assert [r["metadata"]["name"] for r in platform.runs("app") if r["spec"]["action"] == "apply"] == [name]
