"""Runner pods that disappear or cannot be created (issue 11, items 9 and 10), with real terraform, the real
control plane (the controllers behind the fault proxy, which counts their requests) and the local kubelet as
its Node. Each test asserts the outcome, not just the absence of an exception."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from burrito_py.api import annotations as ann
from burrito_py.controllers.run.runner_pod import CONTAINER_SECURITY_CONTEXT, POD_SECURITY_CONTEXT
from tests.support.emulator import wait_for
from tests.support.git_repos import TestRepo
from tests.support.real_cluster import RUNNER_ACCOUNT, RealCluster

from ..conftest import Platform


@pytest.fixture
def platform(fault_platform: Platform) -> Platform:
    """On the real control plane, the controllers behind the fault proxy (docs/architecture.md §22.8)."""
    return fault_platform


# `repo` is the fixture of tests/e2e/conftest.py (a git repository with layers/app).

BACKOFF_WINDOW = 30  # seconds in which the refused pod creations are counted


def live_runs(platform: Any, layer: str) -> list[dict[str, Any]]:
    return [r for r in platform.runs(layer) if (r.get("status") or {}).get("state") not in ("Succeeded", "Failed")]


def events(platform: Any, name: str) -> list[Any]:
    return [e for e in platform.core.list_namespaced_event(platform.namespace).items if e.involved_object.name == name]


def test_a_deleted_runner_pod_is_retried_at_once_on_a_new_attempt(platform: Any, repo: TestRepo) -> None:
    # The runner pod lives a few seconds (init, plan, uploads): it is deleted as soon as it runs.
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app")
    first = wait_for(lambda: next((p for p in platform.pods("app") if p.status and p.status.phase == "Running"),
                                  None), 60, interval=0.05, what="the first runner pod running")
    run_name = first.metadata.labels[ann.LABEL_RUN]
    deleted_at = time.monotonic()
    platform.core.delete_namespaced_pod(first.metadata.name, platform.namespace, grace_period_seconds=0)

    def second_attempt() -> dict[str, Any] | None:
        run = next(r for r in platform.runs("app") if r["metadata"]["name"] == run_name)
        attempts = (run.get("status") or {}).get("attempts") or []
        return run if len(attempts) >= 2 else None

    max_live = 0
    run: dict[str, Any] | None = None
    while time.monotonic() - deleted_at < 30 and run is None:
        max_live = max(max_live, len(live_runs(platform, "app")))
        run = second_attempt()
        time.sleep(0.05)
    assert run is not None, "the run did not start a new attempt within 30 s of losing its pod"
    elapsed = time.monotonic() - deleted_at
    assert elapsed < 15, f"a deleted pod must be noticed at once, not at the resync ({elapsed:.1f} s)"
    first_attempt = run["status"]["attempts"][0]
    assert first_attempt["finishedAt"] and run["status"]["retries"] >= 1
    failed = [e.message for e in events(platform, run_name) if e.reason == "AttemptFailed"]
    assert any("disappeared" in m or "exit code" in m for m in failed), failed
    platform.wait_state("app", "ApplyNeeded", timeout=90)
    assert platform.annotations("app")[ann.PLAN_COMMIT] == repo.head
    assert len(platform.runs("app")) == 1, "the lost pod is retried in its run, not by a new run"
    assert max_live <= 1


def test_a_missing_runner_service_account_is_visible_and_backed_off(platform: Any, repo: TestRepo,
                                                                    real_cluster: RealCluster) -> None:
    platform.core.delete_namespaced_service_account(RUNNER_ACCOUNT, platform.namespace)
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app")
    run = wait_for(lambda: next(iter(platform.runs("app")), None), 60, what="a plan run")
    name = run["metadata"]["name"]
    platform.faults.clear_requests()
    started = time.monotonic()

    def refused_condition() -> dict[str, Any] | None:
        body = next(r for r in platform.runs("app") if r["metadata"]["name"] == name)
        conditions = {c["type"]: c for c in (body.get("status") or {}).get("conditions") or ()}
        return conditions.get("RunnerPodCreated")

    cond = wait_for(refused_condition, 30, what="the RunnerPodCreated condition")
    assert cond["status"] == "False" and cond["reason"] == "PodCreationFailed"
    assert 'serviceaccount "burrito-py-runner" not found' in cond["message"]
    warnings = [e for e in events(platform, name) if e.type == "Warning" and e.reason == "Forbidden"]
    assert warnings and "403" in warnings[0].message and "not found" in warnings[0].message
    wait_for(lambda: (platform.layer("app").get("status") or {}).get("lastResult", "").startswith(
        "Plan cannot start:"), 30, what="the layer's lastResult to say why")
    assert "serviceaccount" in platform.layer("app")["status"]["lastResult"]

    # Backoff 1, 2, 4, 4, … s (failure grace 1 s, cap 4 s in the harness; the failure's time is kept to the second,
    # so a wait may end up to 1 s early): about 8 tries in 30 s, at most one per 3 s once at the cap and two before
    # it: it keeps trying, and never in a burst. (The window was 60 s with at most 20; the bound scales with it.)
    time.sleep(max(0.0, BACKOFF_WINDOW - (time.monotonic() - started)))
    creates = [r for r in platform.faults.requests if r.method == "POST" and r.path.endswith("/pods")]
    assert 3 <= len(creates) <= BACKOFF_WINDOW // 3 + 2, len(creates)
    body = next(r for r in platform.runs("app") if r["metadata"]["name"] == name)
    assert not (body.get("status") or {}).get("attempts"), "a refused pod is not an attempt: retries are kept"
    leases = client.CoordinationV1Api(platform.core.api_client).list_namespaced_lease(platform.namespace).items
    assert all(lease.spec.holder_identity != name for lease in leases)

    real_cluster.restore_tenant_objects(platform.namespace)  # the chart's runner account is back
    platform.wait_state("app", "ApplyNeeded", timeout=60)
    body = next(r for r in platform.runs("app") if r["metadata"]["name"] == name)
    assert body["status"]["state"] == "Succeeded" and not body["status"].get("podCreation")
    assert len(platform.runs("app")) == 1


def test_a_409_on_a_strangers_pod_is_never_adopted(platform: Any, repo: TestRepo) -> None:
    """The attempt's pod name is taken by a pod that is not this run's: the 409 is read back, the pod is not
    adopted (its phase would otherwise decide the attempt), and the run says so."""
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app")
    platform.wait_state("app", "ApplyNeeded", timeout=60)
    revision = platform.annotations("app")[ann.BRANCH_COMMIT]
    namespace = platform.namespace
    # Pod Security `restricted` holds in the test's namespace: the stranger is dressed as the runners are.
    stranger = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "taken-plan-1", "namespace": namespace, "labels": {ann.LABEL_RUN: "taken-plan"}},
                "spec": {"serviceAccountName": RUNNER_ACCOUNT, "restartPolicy": "Never",
                         "securityContext": POD_SECURITY_CONTEXT,
                         "containers": [{"name": "c", "image": "local", "command": ["sleep", "60"],
                                         "securityContext": CONTAINER_SECURITY_CONTEXT}]}}
    platform.core.create_namespaced_pod(namespace, stranger)
    run = {"apiVersion": ann.API_VERSION, "kind": "TerraformRun",
           "metadata": {"name": "taken-plan", "namespace": namespace, "labels": {ann.LABEL_LAYER: "app"}},
           "spec": {"action": "plan", "layer": {"name": "app", "namespace": namespace, "revision": revision}}}
    platform.custom.create_namespaced_custom_object(ann.GROUP, ann.VERSION, namespace, "terraformruns", run)

    def refused() -> dict[str, Any] | None:
        body = next(r for r in platform.runs("app") if r["metadata"]["name"] == "taken-plan")
        return next((c for c in (body.get("status") or {}).get("conditions") or ()
                     if c["type"] == "RunnerPodCreated"), None)

    cond = wait_for(refused, 30, what="the run to refuse the stranger's pod")
    assert cond["status"] == "False" and "does not belong to run taken-plan" in cond["message"]
    body = next(r for r in platform.runs("app") if r["metadata"]["name"] == "taken-plan")
    assert not body["status"].get("attempts"), "the stranger's pod is not an attempt of this run"
    warnings = [e for e in events(platform, "taken-plan") if e.reason == "RunnerPodCreationFailed"]
    assert warnings and "does not belong" in warnings[0].message
