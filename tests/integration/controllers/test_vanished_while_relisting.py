"""Runs and runner pods deleted while a watch was down (docs/architecture.md §6.1): a watch ending with `410 Gone`
starts again by listing, and nothing says what was deleted meanwhile. The inventory kept such a runner pod
"Running" for good (its run waited forever, holding the layer's Lease), and such a run as the layer's active one.
At each resync the controllers now ask the API for the unfinished runs and active runner pods they hold, and forget
what it no longer has. The controllers' own code against the emulator; the inventory holds what the watch last
said."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.api.run import pod_name
from burrito_py.controllers.run.reconcile import reconcile_run
from burrito_py.controllers.vanished import forget_vanished
from burrito_py.timeutil import format_time, utcnow
from tests.support.runner_overrides import RUN, objects

from .conftest import controllers_context, store_run


def running_pod(run: dict[str, Any]) -> dict[str, Any]:
    """The attempt's pod as the watch last saw it: running."""
    return {"metadata": {"name": pod_name(RUN, 1), "namespace": "default", "uid": "pod-uid", "resourceVersion": "5",
                         "labels": {ann.LABEL_RUN: RUN, ann.LABEL_COMPONENT: ann.COMPONENT_RUNNER},
                         "ownerReferences": [{"kind": "TerraformRun", "uid": run["metadata"]["uid"],
                                              "controller": True}]},
            "spec": {"nodeName": "node-1"}, "status": {"phase": "Running"}}


async def _resync_then_reconcile(kubeconfig: Path, stored: list[dict[str, Any]], run: dict[str, Any],
                                 ghost: dict[str, Any]) -> tuple[int, bool, bool]:
    async with controllers_context(kubeconfig, stored, [run, ghost], [running_pod(run)]) as ctx:
        forgotten = await forget_vanished(ctx)
        kept = ctx.inventory.runs.get(("default", RUN)) is not None
        ghost_kept = ctx.inventory.runs.get(("default", ghost["metadata"]["name"])) is not None
        await reconcile_run(ctx, ("default", RUN))
        return forgotten, kept, ghost_kept


def test_a_pod_and_a_run_deleted_while_the_watch_relisted_are_forgotten_and_the_attempt_ends(
        api: tuple[ApiServer, Path]) -> None:
    server, kubeconfig = api
    base = f"/apis/{ann.API_VERSION}/namespaces/default"
    with admin_client(server.url) as admin:
        attempt = {"podName": pod_name(RUN, 1), "number": 1, "startedAt": format_time(utcnow() - timedelta(hours=1))}
        stored, run = store_run(admin, objects("default"), {"state": "Running", "retries": 0, "attempts": [attempt]})
        # A run the watch saw running, deleted since (never in this API): the layer's "active run" for good before.
        ghost = {**run, "metadata": {**run["metadata"], "name": "app-plan-gone", "uid": "gone-uid"}}

        forgotten, kept, ghost_kept = asyncio.run(_resync_then_reconcile(kubeconfig, stored, run, ghost))
        assert (forgotten, kept, ghost_kept) == (2, True, False)  # the pod and the ghost run; the live run kept
        status = admin.get(f"{base}/terraformruns/{RUN}").json()["status"]
        first = status["attempts"][0]
        assert "finishedAt" in first and first.get("exitCode") is None, status
        assert status["state"] in ("FailureGracePeriod", "Retrying"), status
        failed = next(c for c in status["conditions"] if c["type"] == "HasSucceeded")
        assert "disappeared" in failed["message"], failed
