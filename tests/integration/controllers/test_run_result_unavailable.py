"""An attempt ends while the datastore cannot be reached (docs/architecture.md §6.4): the run records nothing of it
and asks again, and now says why on its status (`ResultRecorded=False`) instead of only in the controllers' log.
Once the datastore answers, the attempt is recorded and the condition goes.

The run controller's own reconcile, against the emulator and a real datastore client: first on a port nothing
listens on, then with the in-process datastore started on that very port.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.api.run import pod_name
from burrito_py.datastore.in_process import free_port, running_datastore
from burrito_py.timeutil import format_time, utcnow
from tests.support.runner_overrides import RUN, objects

from .conftest import reconcile_run_once


def ended_pod(run: dict[str, Any]) -> dict[str, Any]:
    """The attempt's runner pod as the watch last saw it: it exited 0, a moment ago (the failed attempt's backoff is
    counted from then: a fixed time would pass it once the clock did)."""
    return {"metadata": {"name": pod_name(RUN, 1), "namespace": "default", "uid": "pod-uid",
                         "labels": {ann.LABEL_RUN: RUN},
                         "ownerReferences": [{"kind": "TerraformRun", "uid": run["metadata"]["uid"],
                                              "controller": True}]},
            "status": {"phase": "Succeeded", "containerStatuses": [{"name": "runner", "state": {"terminated": {
                "exitCode": 0, "finishedAt": format_time(utcnow())}}}]}}


def test_an_attempt_ended_while_the_datastore_is_down_says_so_until_it_is_recorded(
        api: tuple[ApiServer, Path], tmp_path: Path) -> None:
    server, kubeconfig = api
    base = f"/apis/{ann.API_VERSION}/namespaces/default"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with admin_client(server.url) as admin:
        stored = [admin.post(f"{base}/{plural}", json=body).raise_for_status().json()
                  for body, plural in zip(objects("default"), ("terraformrepositories", "terraformlayers",
                                                               "terraformruns"), strict=True)]
        attempt = {"podName": pod_name(RUN, 1), "number": 1, "startedAt": format_time(utcnow() - timedelta(minutes=1)),
                   "podUid": "pod-uid", "logsUploaded": False}
        run = admin.patch(f"{base}/terraformruns/{RUN}/status", json={"status": {
            "state": "Running", "retries": 0, "attempts": [attempt]}},
            headers={"Content-Type": "application/merge-patch+json"}).raise_for_status().json()

        asyncio.run(reconcile_run_once(kubeconfig, stored, run, ended_pod(run), url))
        waiting = admin.get(f"{base}/terraformruns/{RUN}").json()
        status = waiting["status"]
        assert status["state"] == "Running" and "finishedAt" not in status["attempts"][0], status
        cond = next(c for c in status["conditions"] if c["type"] == "ResultRecorded")
        assert cond["status"] == "False" and cond["reason"] == "DatastoreUnavailable", cond
        assert cond["message"].startswith("attempt 1 ended; its result cannot be read yet, asked again every 5s: ")
        assert "datastore unavailable" in cond["message"], cond

        # Asked again while it is still down: the same condition, and no write (its resourceVersion stays).
        asyncio.run(reconcile_run_once(kubeconfig, stored, waiting, ended_pod(waiting), url))
        again = admin.get(f"{base}/terraformruns/{RUN}").json()
        assert again["metadata"]["resourceVersion"] == waiting["metadata"]["resourceVersion"]

        with running_datastore(tmp_path / "datastore", port=port):
            asyncio.run(reconcile_run_once(kubeconfig, stored, again, ended_pod(again), url))
        status = admin.get(f"{base}/terraformruns/{RUN}").json()["status"]
    # Recorded: the datastore holds no plan of it, so the attempt failed naming what is missing (§6.4).
    assert status["attempts"][0]["finishedAt"] and status["state"] == "FailureGracePeriod", status
    assert "ResultRecorded" not in {c["type"] for c in status["conditions"]}
