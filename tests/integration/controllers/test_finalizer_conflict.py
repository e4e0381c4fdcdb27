"""The destroy finalizer's write meeting a change of the layer (docs/architecture.md §5.7).

The write replaces the finalizer list with the layer's resourceVersion as a precondition. A 409 (another finalizer
added, the layer touched by whoever) used to end the write and decide again a second later, which posted the release
Warning (`DestroySkipped`, `DestroySucceeded`) a second time: the CRD deletion guard's end-to-end test saw two. The
layer is now read again and the write made on its own list, another controller's finalizer kept.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.destroy import DESTROY_FINALIZER
from burrito_py.controllers.layer.finalizers import set_destroy_finalizer
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.kube.client import Kube

LAYERS = f"/apis/{ann.API_VERSION}/namespaces/default/terraformlayers"
OTHER = "example.com/keep"


def test_a_finalizer_added_meanwhile_is_kept_and_ours_removed_in_one_call(api: tuple[ApiServer, Path]) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        body = {"apiVersion": ann.API_VERSION, "kind": "TerraformLayer",
                "metadata": {"name": "app", "finalizers": [DESTROY_FINALIZER]},
                "spec": {"repository": {"name": "repo"}, "branch": "main", "path": "app"}}
        stale = admin.post(LAYERS, json=body).raise_for_status().json()
        admin.patch(f"{LAYERS}/app", json={"metadata": {"finalizers": [DESTROY_FINALIZER, OTHER]}},
                    headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()

        async def release() -> tuple[dict[str, Any] | None, float | None]:
            kube = await Kube.connect(str(kubeconfig))
            try:
                ctx = Context(settings=ControllerSettings(metrics_port=0), kube=kube)
                woken: list[float | None] = []
                ctx.wake_layer = lambda key, after=None: woken.append(after)  # type: ignore[method-assign]
                updated = await set_destroy_finalizer(ctx, stale, present=False)
                return updated, woken[0] if woken else None
            finally:
                await kube.close()

        updated, woken = asyncio.run(release())
        assert updated is not None and woken is None  # done now, not decided again later
        assert admin.get(f"{LAYERS}/app").json()["metadata"]["finalizers"] == [OTHER]
