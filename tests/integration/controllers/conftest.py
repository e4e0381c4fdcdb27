"""Fixtures of the controllers' integration tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier

from burrito_py.api import annotations as ann
from burrito_py.api.crdgen import generate_crds
from burrito_py.controllers.context import Context
from burrito_py.controllers.run.reconcile import reconcile_run
from burrito_py.datastore.client import DatastoreClient
from burrito_py.kube.client import Kube
from tests.support.runner_overrides import RUN, settings


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[ApiServer, Path]]:
    """The emulator with burrito-py's CRDs, and a kubeconfig for it."""
    server = ApiServer(pod_log_dir=tmp_path / "logs").start()
    applier = Applier(server.url)
    try:
        for crd in generate_crds().values():
            applier.apply(crd)
        yield server, server.write_kubeconfig(tmp_path / "kubeconfig")
    finally:
        applier.close()
        server.stop()


def store_run(admin: httpx.Client, bodies: Sequence[dict[str, Any]], status: dict[str, Any]
              ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The repository, layer and run `bodies` (`objects()`, tests/support/runner_overrides.py) stored in namespace
    default, then the run's `status` written as the run controller writes it: (what was stored, the run now)."""
    base = f"/apis/{ann.API_VERSION}/namespaces/default"
    plurals = ("terraformrepositories", "terraformlayers", "terraformruns")
    stored = [admin.post(f"{base}/{plural}", json=body).raise_for_status().json()
              for body, plural in zip(bodies, plurals, strict=True)]
    run = admin.patch(f"{base}/terraformruns/{stored[2]['metadata']['name']}/status", json={"status": status},
                      headers={"Content-Type": "application/merge-patch+json"}).raise_for_status().json()
    return stored, run


@contextlib.asynccontextmanager
async def controllers_context(kubeconfig: Path, stored: list[dict[str, Any]], runs: Sequence[dict[str, Any]],
                              pods: Sequence[dict[str, Any]] = (), pull_requests: Sequence[dict[str, Any]] = (),
                              datastore_url: str | None = None) -> AsyncIterator[Context]:
    """The controllers' context, its inventory holding the stored repository and layer and the given runs, pods and
    pull requests as the watches last saw them, primed; with a datastore client for `datastore_url`, else none."""
    kube = await Kube.connect(str(kubeconfig))
    store = DatastoreClient(datastore_url, timeout=2.0) if datastore_url is not None else None
    try:
        ctx = Context(settings=settings(), kube=kube, datastore=store)
        ctx.inventory.repositories.observe(stored[0])
        ctx.inventory.layers.observe(stored[1])
        for run in runs:
            ctx.inventory.runs.observe(run)
        for pod in pods:
            ctx.inventory.pods.observe(pod)
        for pull_request in pull_requests:
            ctx.inventory.pull_requests.observe(pull_request)
        ctx.primed = True
        yield ctx
    finally:
        if store is not None:
            store.close()
        await kube.close()


async def reconcile_run_once(kubeconfig: Path, stored: list[dict[str, Any]], run: dict[str, Any],
                             pod: dict[str, Any], datastore_url: str | None = None) -> None:
    """One reconcile of the run controller for `RUN` (tests/support/runner_overrides.py), its inventory holding the
    stored repository and layer, `run` and its latest attempt's `pod` as the watch last saw them; with a datastore
    client for `datastore_url`, else none."""
    async with controllers_context(kubeconfig, stored, [run], [pod], datastore_url=datastore_url) as ctx:
        await reconcile_run(ctx, ("default", RUN))


async def sync_repository_once(kubeconfig: Path, namespace: str, name: str, **overrides: Any) -> None:
    """One reconcile of repository `namespace/name` by the repository controller's own code, its inventory holding
    every repository and layer of the namespace as the API has them now; `overrides`: controller settings."""
    from burrito_py.controllers.repository.reconcile import reconcile_repository

    kube = await Kube.connect(str(kubeconfig))
    try:
        ctx = Context(settings=settings(**overrides), kube=kube)
        base = f"/apis/{ann.API_VERSION}/namespaces/{namespace}"
        for plural, held in (("terraformrepositories", ctx.inventory.repositories),
                             ("terraformlayers", ctx.inventory.layers)):
            for body in (await kube.get(f"{base}/{plural}") or {}).get("items") or ():
                held.observe({"apiVersion": ann.API_VERSION, **body})
        ctx.primed = True
        await reconcile_repository(ctx, (namespace, name))
    finally:
        await kube.close()


def delivery_outcome(kubeconfig: Path, layer: dict[str, Any], notifier: dict[str, Any], notes: Sequence[Any],
                     outbound: Any = None) -> str:
    """`status.lastDelivery.result` of `notifier` after the controllers' own notifications send it `notes` about
    `layer` (`outbound`: the OutboundPolicy deliveries follow, default the controllers')."""
    from burrito_py.controllers.layer.notifications import Notifications

    async def outcome() -> str:
        kube = await Kube.connect(str(kubeconfig))
        notifications = Notifications(outbound) if outbound is not None else Notifications()
        name = notifier["metadata"]["name"]
        try:
            notifications.notifiers.observe(notifier)
            notifications.send(kube, layer, list(notes))
            deadline = asyncio.get_running_loop().time() + 30
            while asyncio.get_running_loop().time() < deadline:
                body = await kube.get(f"/apis/{ann.API_VERSION}/namespaces/default/terraformnotifiers/{name}")
                result = (((body or {}).get("status") or {}).get("lastDelivery") or {}).get("result")
                if result:
                    return str(result)
                await asyncio.sleep(0.05)
            raise AssertionError("no outcome recorded")
        finally:
            await notifications.close()
            await kube.close()

    return asyncio.run(outcome())
