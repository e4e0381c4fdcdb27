"""Runner pods that do not start (docs/architecture.md §6.1), on the real control plane: its scheduler, and the
local kubelet as its Node. Before, such a pod kept its run Running for good and nothing said why."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from kubernetes import client
from prometheus_client import REGISTRY

from burrito_py.api import annotations as ann
from burrito_py.api.runner_secrets import RUNNER_SECRET
from tests.support.emulator import wait_for
from tests.support.git_repos import TestRepo
from tests.support.real_cluster import RealCluster

from ..conftest import running_platform

# Runner pods select no node: the scheduler leaves them Pending, PodScheduled=False, reason Unschedulable.
NO_NODE = {"nodeSelector": {"burrito-py.io/e2e-no-such-node": "true"}}


def run_of(platform: Any, layer: str) -> dict[str, Any] | None:
    return next(iter(platform.runs(layer)), None)


def condition(run: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    return next((c for c in ((run or {}).get("status") or {}).get("conditions") or () if c["type"] == kind), None)


def events(platform: Any, name: str, reason: str) -> list[str]:
    return [e.message for e in platform.core.list_namespaced_event(platform.namespace).items
            if e.involved_object.name == name and e.reason == reason]


def test_an_unschedulable_runner_pod_says_why_then_is_deleted_and_its_attempt_fails(
        tmp_path: Path, repo: TestRepo, real_cluster: RealCluster) -> None:
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", cluster=real_cluster,
                          runner_start_timeout=timedelta(seconds=8)) as platform:
        platform.create_repository("repo", repo.url)
        platform.create_layer("app", "repo", "layers/app", overrideRunnerSpec=NO_NODE,
                              remediation={"onError": {"maxRetries": 0}})
        waiting = wait_for(lambda: (c := condition(run_of(platform, "app"), "RunnerPodStarted")) and
                           c["reason"] == "Unschedulable" and c, 30, interval=0.1,
                           what="the run to say its pod is unschedulable")
        assert waiting["status"] == "False" and "nodes are available" in waiting["message"], waiting
        assert "the attempt fails if it has not started by" in waiting["message"]
        run = run_of(platform, "app")
        assert run is not None and run["status"]["state"] == "Running"
        name = run["metadata"]["name"]

        def ended() -> dict[str, Any] | None:
            body = next(r for r in platform.runs("app") if r["metadata"]["name"] == name)
            return body if body["status"].get("state") in ("Failed", "Succeeded") else None

        failed = wait_for(ended, 60, interval=0.1, what="the run to end once its pod was given up")
        # The run ends only once its pod is gone: nothing can overlap a pod that might still have started.
        assert [p.metadata.name for p in platform.pods("app")] == []
        assert failed["status"]["state"] == "Failed", failed["status"]
        first = failed["status"]["attempts"][0]
        assert first["notStarted"].startswith(f"runner pod {first['podName']} did not start within 8s (Unschedulable:")
        assert "nodes are available" in first["notStarted"]
        succeeded = condition(failed, "HasSucceeded")
        assert succeeded is not None and succeeded["message"] == first["notStarted"]
        assert condition(failed, "RunnerPodStarted") is None, "an ended run has no pod to wait for"
        assert events(platform, name, "RunnerPodNotStarted") == [
            f"attempt 1: {first['notStarted']}: deleting it"]
        assert any(first["notStarted"] in m for m in events(platform, name, "AttemptFailed"))
        # The controllers run in this process: their counter, which the chart's alert reads, counted it once.
        assert REGISTRY.get_sample_value("burrito_py_runner_pods_not_started_total",
                                         {"namespace": platform.namespace}) == 1.0
        leases = client.CoordinationV1Api(platform.core.api_client).list_namespaced_lease(platform.namespace).items
        assert all(lease.spec.holder_identity != name for lease in leases), "the layer's Lease is released"
        assert "did not start within 8s" in wait_for(
            lambda: (platform.layer("app").get("status") or {}).get("lastResult", ""), 30,
            what="the layer's lastResult to say why")


def test_a_runner_pod_waiting_for_a_secret_says_so_and_starts_once_it_exists(
        tmp_path: Path, repo: TestRepo, real_cluster: RealCluster) -> None:
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", cluster=real_cluster,
                          runner_start_timeout=timedelta(minutes=5)) as platform:
        platform.create_repository("repo", repo.url)
        state = platform.state_file("app")
        state.parent.mkdir(parents=True, exist_ok=True)
        late = {"name": "TF_VAR_unused", "valueFrom": {"secretKeyRef": {"name": "late", "key": "value"}}}
        platform.create_layer("app", "repo", "layers/app", overrideRunnerSpec={
            "extraInitArgs": [f"-backend-config=path={state}"], "env": [late]})
        # A Secret the pod would name must exist and be opened to runners (api/runner_secrets.py): no pod is made
        # until it is, and the run says why (it no longer waits in the kubelet for whatever Secret appears).
        waiting = wait_for(lambda: (c := condition(run_of(platform, "app"), "RunnerPodCreated")) and
                           c["reason"] == "PodCreationFailed" and c, 60, interval=0.1,
                           what="the run to say its pod waits for a Secret")
        assert "Secret " + platform.namespace + "/late (TerraformLayer" in waiting["message"], waiting
        assert "does not exist" in waiting["message"], waiting
        platform.core.create_namespaced_secret(platform.namespace, client.V1Secret(
            metadata=client.V1ObjectMeta(name="late", annotations={RUNNER_SECRET: "true"}), string_data={"value": "x"}))
        platform.wait_state("app", "ApplyNeeded", timeout=90)
        run = run_of(platform, "app")
        assert run is not None and run["status"]["state"] == "Succeeded"
        assert len(run["status"]["attempts"]) == 1 and "notStarted" not in run["status"]["attempts"][0]
        assert condition(run, "RunnerPodStarted") is None
        assert events(platform, run["metadata"]["name"], "RunnerPodNotStarted") == []
        assert platform.annotations("app")[ann.PLAN_COMMIT] == repo.head
