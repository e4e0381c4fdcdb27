"""A request written while the controllers consume the one before it is kept (docs/architecture.md §5.12).

The layer controller decides on the annotations it last saw, then removes the ones it acted on: the `operation`
request a run was made for, `sync-now`, `approve-plan`. That removal was a merge patch setting them to null, so a
person's new request written between the read and the removal (the watch's cache lags, and a run create and events
come in between) was removed with it: a state operation asked for, acknowledged by the API, never run and never
told. Now each annotation is removed only while it still holds the value acted on (a JSON patch `test` before each
`remove`). The layer controller's own reconcile, against the emulator.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.api.operations import operation_digest
from burrito_py.controllers.layer.reconcile import reconcile_layer
from burrito_py.kube.client import Kube
from tests.integration.controllers.conftest import controllers_context, store_run
from tests.support.runner_overrides import objects

LAYER = f"/apis/{ann.API_VERSION}/namespaces/default/terraformlayers/app"
FIRST = json.dumps({"operation": "force-unlock", "lockId": "6f1c"})
SECOND = json.dumps({"operation": "state-rm", "address": "null_resource.old"})


def stored_with_a_run_for_the_first_request(admin: httpx.Client) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A layer asking for FIRST (by alice), and the run made for it, running (so nothing else is decided): the
    request's removal is due."""
    repository, layer, run = objects("default", layer_override={}, repository_override={})
    layer["metadata"]["annotations"] = {ann.BRANCH_COMMIT: "c" * 40, ann.OPERATION: FIRST, ann.OPERATION_BY: "alice"}
    run["metadata"]["annotations"] = {ann.RUN_OPERATION: operation_digest(FIRST, "alice")}
    return store_run(admin, (repository, layer, run), {"state": "Running"})


def ask_again(admin: httpx.Client, value: str, by: str) -> None:
    """bob's request, written after the controllers' watch saw the layer."""
    admin.patch(LAYER, json={"metadata": {"annotations": {ann.OPERATION: value, ann.OPERATION_BY: by}}},
                headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()


def test_attack_an_operation_requested_while_the_last_one_is_consumed_is_kept(api: tuple[ApiServer, Path]) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        stored, run = stored_with_a_run_for_the_first_request(admin)
        ask_again(admin, SECOND, "bob")

        async def reconcile() -> None:
            async with controllers_context(kubeconfig, stored, [run]) as ctx:  # the layer as last seen: FIRST
                await reconcile_layer(ctx, ("default", "app"))

        asyncio.run(reconcile())
        annotations = admin.get(LAYER).raise_for_status().json()["metadata"]["annotations"]
        assert (annotations.get(ann.OPERATION), annotations.get(ann.OPERATION_BY)) == (SECOND, "bob"), annotations


def test_the_request_acted_on_is_removed_and_only_what_still_holds_its_value(api: tuple[ApiServer, Path]) -> None:
    """Kube.remove_annotations: an unchanged request goes; of two, the rewritten one stays and the other goes; an
    object gone is None."""
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        stored_with_a_run_for_the_first_request(admin)

        async def remove(acted_on: dict[str, str], path: str = LAYER) -> dict[str, Any] | None:
            kube = await Kube.connect(str(kubeconfig))
            try:
                return await kube.remove_annotations(path, acted_on)
            finally:
                await kube.close()

        admin.patch(LAYER, json={"metadata": {"annotations": {ann.SYNC_NOW: "1"}}},
                    headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()
        after = asyncio.run(remove({ann.OPERATION: FIRST, ann.OPERATION_BY: "alice", ann.SYNC_NOW: "1"}))
        assert after is not None
        assert not {ann.OPERATION, ann.OPERATION_BY, ann.SYNC_NOW} & set(after["metadata"]["annotations"])

        ask_again(admin, SECOND, "bob")
        after = asyncio.run(remove({ann.OPERATION: SECOND, ann.OPERATION_BY: "alice"}))  # bob asked, not alice
        assert after is not None
        annotations = after["metadata"]["annotations"]
        assert (annotations.get(ann.OPERATION), annotations.get(ann.OPERATION_BY)) == (None, "bob"), annotations
        assert admin.get(LAYER).json()["metadata"]["annotations"] == annotations

        assert asyncio.run(remove({ann.OPERATION_BY: "bob"}, LAYER.replace("/app", "/gone"))) is None
