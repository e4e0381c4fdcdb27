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
from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.destroy import DESTROY_FINALIZER
from burrito_py.controllers.layer.reconcile import reconcile_layer
from burrito_py.controllers.run.reconcile import reconcile_run
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.controllers.vanished import forget_vanished
from burrito_py.kube.client import Kube
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


def layer_body(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": ann.API_VERSION, "kind": "TerraformLayer", "metadata": {"name": name, "namespace": "default"},
            "spec": {"repository": {"name": "repo"}, "branch": "main", "path": name, **spec}}


def test_a_dependent_deleted_while_the_watch_relisted_no_longer_holds_its_upstreams_destroy(
        api: tuple[ApiServer, Path]) -> None:
    """`network` destroys its resources when deleted and waits for the layers depending on it. `app` depended on it
    and was deleted while the watch was down: the inventory kept it, and `network`'s destroy waited for it for good
    (`WaitingForDependents`, naming a layer that no longer exists). The resync now asks the API about the layers a
    deletion waits for."""
    server, kubeconfig = api
    base = f"/apis/{ann.API_VERSION}/namespaces/default/terraformlayers"
    with admin_client(server.url) as admin:
        upstream = layer_body("network", destroyResourcesOnDeletion=True)
        upstream["metadata"]["finalizers"] = [DESTROY_FINALIZER]
        upstream["metadata"]["annotations"] = {ann.BRANCH_COMMIT: "c1"}
        admin.post(base, json=upstream).raise_for_status()
        admin.delete(f"{base}/network").raise_for_status()
        deleting = admin.get(f"{base}/network").raise_for_status().json()
        # As the watch last saw it: never deleted in the inventory, gone from the API.
        ghost = {**layer_body("app", dependsOn=[{"name": "network"}]),
                 "metadata": {"name": "app", "namespace": "default", "uid": "app-uid", "resourceVersion": "3"}}

        async def resync_then_reconcile() -> tuple[int, bool]:
            kube = await Kube.connect(str(kubeconfig))
            try:
                ctx = Context(settings=ControllerSettings(metrics_port=0), kube=kube)
                for body in (deleting, ghost):
                    ctx.inventory.layers.observe(body)
                ctx.primed = True
                assert ctx.inventory.layers.dependents_of(("default", "network")) == (("default", "app"),)
                forgotten = await forget_vanished(ctx)
                await reconcile_layer(ctx, ("default", "network"))
                return forgotten, ctx.inventory.layers.get(("default", "app")) is None
            finally:
                await kube.close()

        forgotten, gone = asyncio.run(resync_then_reconcile())
        assert (forgotten, gone) == (1, True)
        conditions = (admin.get(f"{base}/network").json().get("status") or {}).get("conditions") or []
        destroy = next((c for c in conditions if c.get("type") == "HasDestroyFailed"), {})
        assert destroy.get("reason") != "WaitingForDependents" and "default/app" not in str(destroy), conditions
