"""Attack: a tenant holds another team's destroy through a dependency it is refused (docs/architecture.md §5.11,
§24).

A layer being deleted with `destroyResourcesOnDeletion` waits (`WaitingForDependents`) while a layer naming it in
`spec.dependsOn` exists. With `allowCrossNamespaceDependencies` off, a layer of team-b naming team-a's layer is
refused (`CrossNamespaceDenied`), yet the dependents index counted it: team-a's destroy waited for a layer team-a
can neither see nor delete, and its status named it. The layer controller's own reconcile, against the emulator.
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
from burrito_py.controllers.layer.reconcile import reconcile_layer
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.kube.client import Kube

LAYERS = f"/apis/{ann.API_VERSION}/namespaces/{{}}/terraformlayers"


def layer(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": ann.API_VERSION, "kind": "TerraformLayer", "metadata": {"name": name, "namespace": namespace},
            "spec": {"repository": {"name": "repo"}, "branch": "main", "path": name, **spec}}


def deleting_upstream(admin: Any) -> dict[str, Any]:
    """team-a's `network`, which destroys its resources when deleted and ran once, now being deleted."""
    body = layer("team-a", "network", destroyResourcesOnDeletion=True)
    body["metadata"]["finalizers"] = [DESTROY_FINALIZER]
    body["metadata"]["annotations"] = {ann.BRANCH_COMMIT: "c1"}
    admin.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    admin.post(LAYERS.format("team-a"), json=body).raise_for_status()
    admin.delete(f"{LAYERS.format('team-a')}/network").raise_for_status()
    return admin.get(f"{LAYERS.format('team-a')}/network").raise_for_status().json()


def reconcile_upstream(kubeconfig: Path, settings: ControllerSettings, *bodies: dict[str, Any]) -> None:
    async def once() -> None:
        kube = await Kube.connect(str(kubeconfig))
        try:
            ctx = Context(settings=settings, kube=kube)
            for body in bodies:
                ctx.inventory.layers.observe(body)
            ctx.primed = True
            await reconcile_layer(ctx, ("team-a", "network"))
        finally:
            await kube.close()

    asyncio.run(once())


def destroy_condition(admin: Any) -> dict[str, Any]:
    body = admin.get(f"{LAYERS.format('team-a')}/network").raise_for_status().json()
    conditions = (body.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "HasDestroyFailed"), {})


def test_attack_a_refused_cross_namespace_dependent_does_not_hold_another_teams_destroy(
    api: tuple[ApiServer, Path],
) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        upstream = deleting_upstream(admin)
        squatter = layer("team-b", "squatter", dependsOn=[{"name": "network", "namespace": "team-a"}])
        reconcile_upstream(kubeconfig, ControllerSettings(metrics_port=0), upstream, squatter)

        condition = destroy_condition(admin)
        assert condition.get("reason") != "WaitingForDependents", condition
        assert "team-b" not in str(condition), condition


def test_a_dependent_the_platform_allows_across_namespaces_still_holds_the_destroy(
    api: tuple[ApiServer, Path],
) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        upstream = deleting_upstream(admin)
        dependent = layer("team-b", "app", dependsOn=[{"name": "network", "namespace": "team-a"}])
        reconcile_upstream(kubeconfig, ControllerSettings(metrics_port=0, allow_cross_namespace_dependencies=True),
                           upstream, dependent)

        condition = destroy_condition(admin)
        assert condition.get("reason") == "WaitingForDependents" and "team-b/app" in condition["message"], condition
