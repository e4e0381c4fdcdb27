"""Attack: a name a tenant writes in a reference walks out of their namespace (docs/architecture.md §24).

The controllers build API paths from the names tenants write (`spec.varsFrom[].name`, a repository's
`secretName`, a notifier's Secret references, …), and the HTTP client resolves dot segments before it sends a
request: `varsFrom: [{kind: Secret, name: ../../team-b/secrets/db}]` on a layer of team-a made the controllers, which
may read Secrets in every tenant namespace, read team-b's Secret `db` and hand its values to team-a's runner. The
layer controller's own varsFrom read and the client itself, against the emulator.
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.api.runner_secrets import RUNNER_SECRET
from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.run_inputs import read_sources
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.kube.client import Kube, KubeError, path

SECRET_VALUE = "team-b-database-password"


def namespace_with_secret(admin: Any, namespace: str, name: str, value: str) -> None:
    """A Secret opened to runners (api/runner_secrets.py): even so, only its own namespace's layers may read it."""
    admin.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    admin.post(f"/api/v1/namespaces/{namespace}/secrets", json={
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "annotations": {RUNNER_SECRET: "true"}},
        "data": {"db_password": base64.b64encode(value.encode()).decode()},
    }).raise_for_status()


def layer_reading(name: str) -> dict[str, Any]:
    return {"apiVersion": ann.API_VERSION, "kind": "TerraformLayer",
            "metadata": {"name": "app", "namespace": "team-a", "uid": "uid-app"},
            "spec": {"repository": {"name": "repo"}, "branch": "main", "path": "app",
                     "varsFrom": [{"kind": "Secret", "name": name}]}}


async def sources_of(kubeconfig: Path, layer: dict[str, Any]) -> Any:
    kube = await Kube.connect(str(kubeconfig))
    try:
        return await read_sources(Context(settings=ControllerSettings(metrics_port=0), kube=kube), layer)
    finally:
        await kube.close()


@pytest.mark.parametrize("name", ["../../team-b/secrets/db", "%2e%2e/%2e%2e/team-b/secrets/db",
                                  "x/../../../team-b/secrets/db"])
def test_attack_a_varsfrom_name_cannot_read_another_namespaces_secret(api: tuple[ApiServer, Path], name: str) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        namespace_with_secret(admin, "team-a", "mine", "team-a-value")
        namespace_with_secret(admin, "team-b", "db", SECRET_VALUE)

        sources = asyncio.run(sources_of(kubeconfig, layer_reading(name)))

        assert SECRET_VALUE not in str(sources.values), "team-a's layer read team-b's Secret"
        assert sources.error is not None and "spec.varsFrom[0]" in sources.error, sources
        assert "never a path" in sources.error, sources.error  # refused before any request is made
        # The layer's own Secret is still read as before.
        mine = asyncio.run(sources_of(kubeconfig, layer_reading("mine")))
        assert mine.error is None and mine.values == ({"db_password": "team-a-value"},)


@pytest.mark.parametrize(("namespace", "name"), [("team-a", ".."), ("team-a", "."), ("team-a", "a/b"),
                                                  ("..", "db"), ("team-a", "%2e%2e"), ("team-a/../team-b", "db")])
def test_an_object_path_never_holds_a_segment_the_client_would_resolve(namespace: str, name: str) -> None:
    with pytest.raises(KubeError) as refused:
        path("v1", "secrets", namespace, name)
    assert refused.value.status == 400 and "not an object name" in refused.value.message


def test_the_client_refuses_a_path_with_dot_segments(api: tuple[ApiServer, Path]) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        namespace_with_secret(admin, "team-b", "db", SECRET_VALUE)

    async def read(resource_path: str) -> Any:
        kube = await Kube.connect(str(kubeconfig))
        try:
            return await kube.get(resource_path)
        finally:
            await kube.close()

    for crafted in ("/api/v1/namespaces/team-a/secrets/../../team-b/secrets/db",
                    "/api/v1/namespaces/team-a/secrets/%2E%2E/%2e%2e/team-b/secrets/db"):
        with pytest.raises(KubeError) as refused:
            asyncio.run(read(crafted))
        assert refused.value.status == 400, crafted
    assert asyncio.run(read("/api/v1/namespaces/team-b/secrets/db")) is not None
