"""Fixtures of the controllers' integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier

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


async def reconcile_run_once(kubeconfig: Path, stored: list[dict[str, Any]], run: dict[str, Any],
                             pod: dict[str, Any], datastore_url: str | None = None) -> None:
    """One reconcile of the run controller for `RUN` (tests/support/runner_overrides.py), its inventory holding the
    stored repository and layer, `run` and its latest attempt's `pod` as the watch last saw them; with a datastore
    client for `datastore_url`, else none."""
    kube = await Kube.connect(str(kubeconfig))
    store = DatastoreClient(datastore_url, timeout=2.0) if datastore_url is not None else None
    try:
        ctx = Context(settings=settings(), kube=kube, datastore=store)
        ctx.inventory.repositories.observe(stored[0])
        ctx.inventory.layers.observe(stored[1])
        ctx.inventory.runs.observe(run)
        ctx.inventory.pods.observe(pod)
        ctx.primed = True
        await reconcile_run(ctx, ("default", RUN))
    finally:
        if store is not None:
            store.close()
        await kube.close()
