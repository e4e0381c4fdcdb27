"""A runner pod whose node is lost (docs/architecture.md §6.1): deleted, it stays (no kubelet confirms it stopped), and
its run waits, as Terraform may still run there. Before, nothing said why the run stayed Running; now, once the pod
is still there two minutes after its grace period ended, the run says so (`RunnerPodStopped=False, StopOverdue`,
naming the node and what to do) with a Warning event, once. The run controller's own reconcile, against the
emulator, with the pod as its watch last saw it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.api.run import pod_name
from burrito_py.timeutil import format_time, utcnow
from tests.support.runner_overrides import RUN, objects

from .conftest import reconcile_run_once, store_run


def lost_pod(run: dict[str, Any]) -> dict[str, Any]:
    """The attempt's pod, deleted ten minutes ago with a 2-minute grace period, on a node that never answered."""
    return {"metadata": {"name": pod_name(RUN, 1), "namespace": "default", "uid": "pod-uid",
                         "labels": {ann.LABEL_RUN: RUN},
                         "deletionTimestamp": format_time(utcnow() - timedelta(minutes=8)),
                         "ownerReferences": [{"kind": "TerraformRun", "uid": run["metadata"]["uid"],
                                              "controller": True}]},
            "spec": {"nodeName": "node-7"},
            "status": {"phase": "Running", "containerStatuses": [{"name": "runner", "state": {"running": {
                "startedAt": "2026-11-28T11:00:00Z"}}}]}}


def test_a_pod_lost_with_its_node_keeps_its_run_waiting_and_says_why(api: tuple[ApiServer, Path]) -> None:
    server, kubeconfig = api
    base = f"/apis/{ann.API_VERSION}/namespaces/default"
    with admin_client(server.url) as admin:
        attempt = {"podName": pod_name(RUN, 1), "number": 1, "startedAt": format_time(utcnow() - timedelta(hours=1))}
        stored, run = store_run(admin, objects("default"), {"state": "Running", "retries": 0, "attempts": [attempt]})

        asyncio.run(reconcile_run_once(kubeconfig, stored, run, lost_pod(run)))
        waiting = admin.get(f"{base}/terraformruns/{RUN}").json()
        status = waiting["status"]
        assert status["state"] == "Running" and "finishedAt" not in status["attempts"][0], status
        cond = next(c for c in status["conditions"] if c["type"] == "RunnerPodStopped")
        assert cond["status"] == "False" and cond["reason"] == "StopOverdue", cond
        assert cond["message"].startswith(f"runner pod {pod_name(RUN, 1)} on node node-7 was to be stopped by "), cond
        # Asked again: the same, and no second event.
        asyncio.run(reconcile_run_once(kubeconfig, stored, waiting, lost_pod(waiting)))
        events = [e for e in admin.get("/api/v1/namespaces/default/events").json()["items"]
                  if e["reason"] == "RunnerPodStopOverdue"]
    assert [(e["type"], e["involvedObject"]["name"], e["message"]) for e in events] == [
        ("Warning", RUN, cond["message"])]
