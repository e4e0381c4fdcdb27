"""Retention against the API emulator and a real datastore: what layers, runs and repositories reference
stays readable over HTTP, the rest goes — in-process and through `burrito-py datastore start`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier

from burrito_py.api import annotations as ann
from burrito_py.api.crdgen import generate_crds
from burrito_py.datastore.app import DatastoreSettings, read_cache_for
from burrito_py.datastore.client import DatastoreClient
from burrito_py.datastore.in_process import free_port, running_datastore
from burrito_py.datastore.kubeapi import connect
from burrito_py.datastore.retention import Retention, retention_loop
from burrito_py.datastore.storage import FilesystemStorage
from tests.conftest import KUBECONFIG_PATH
from tests.support.emulator import wait_for

ADMIN = {"Authorization": "Bearer burrito-py-local-admin"}
BASE = f"/apis/{ann.API_VERSION}/namespaces/default"


def _status(server: ApiServer, plural: str, name: str, status: dict[str, Any]) -> None:
    response = httpx.patch(
        f"{server.url}{BASE}/{plural}/{name}/status",
        json={"status": status},
        headers={**ADMIN, "Content-Type": "application/merge-patch+json"},
    )
    assert response.status_code == 200, response.text


@pytest.fixture
def cluster(apiserver: ApiServer) -> Iterator[ApiServer]:
    """Our CRDs, one repository, two layers and two runs that reference some artifacts."""
    applier = Applier(apiserver.url)
    try:
        for crd in generate_crds().values():
            applier.apply(crd)
        applier.apply({"apiVersion": ann.API_VERSION, "kind": "TerraformRepository",
                       "metadata": {"name": "repo", "namespace": "default"},
                       "spec": {"repository": {"url": "file:///nowhere"}}})
        for name in ("app", "net"):
            # `net-apply-1` is gone from the cluster, but its outputs are the layer's current outputs.
            applied = {ann.APPLY_RUN: "net-apply-1/1"} if name == "net" else {}
            applier.apply({"apiVersion": ann.API_VERSION, "kind": "TerraformLayer",
                           "metadata": {"name": name, "namespace": "default", "annotations": {
                               ann.BRANCH_COMMIT: "c-head", ann.PLAN_RUN: f"{name}-plan-2/1", **applied}},
                           "spec": {"repository": {"name": "repo"}, "branch": "main", "path": name}})
        # `apply-1` exists as a run and applies `app-plan-3`'s plan.
        applier.apply({"apiVersion": ann.API_VERSION, "kind": "TerraformRun",
                       "metadata": {"name": "app-apply-1", "namespace": "default"},
                       "spec": {"action": "apply", "layer": {"name": "app", "revision": "c-run"},
                                "artifact": {"run": "app-plan-3", "attempt": 1}}})
    finally:
        applier.close()
    _status(apiserver, "terraformlayers", "app", {
        "latestRuns": [{"name": "app-plan-1", "action": "plan", "revision": "c-old"}],
    })
    _status(apiserver, "terraformrepositories", "repo", {"branches": [{"name": "main", "latestRev": "c-branch"}]})
    yield apiserver


def _seed(client: DatastoreClient) -> None:
    for run in ("app-plan-1", "app-plan-2", "app-plan-3", "app-plan-9", "app-apply-1"):
        client.put_plan("default", "app", run, 1, "json", b"{}")
        client.put_logs("default", "app", run, 1, b"log")
    client.put_outputs("default", "app", "app-plan-9", 1, b"{}")
    client.put_outputs("default", "net", "net-apply-1", 1, b'{"id": {"value": "x"}}')
    client.put_plan("default", "net", "net-plan-2", 1, "bin", b"plan")
    client.put_plan("default", "net", "net-plan-1", 1, "bin", b"old plan")
    client.put_plan("default", "gone", "gone-plan-1", 1, "bin", b"layer deleted")
    for revision, tree in [("c-head", "t1"), ("c-run", "t2"), ("c-old", "t3"), ("c-branch", "t4"),
                           ("c-stale", "t1"), ("c-stale2", "t5")]:
        client.put_source("default", "repo", revision, tree, f"archive {tree}".encode())


KEPT_RUNS = {("app", "app-plan-1"), ("app", "app-plan-2"), ("app", "app-plan-3"), ("app", "app-apply-1"),
             ("net", "net-plan-2"), ("net", "net-apply-1")}


def _check(client: DatastoreClient, data: Path) -> None:
    for layer, run in KEPT_RUNS - {("net", "net-apply-1")}:
        fmt = "bin" if layer == "net" else "json"
        assert client.get_plan("default", layer, run, 1, fmt)
    assert client.get_outputs("default", "net", "net-apply-1", 1) == b'{"id": {"value": "x"}}'
    for revision in ("c-head", "c-run", "c-old", "c-branch"):
        assert client.has_source("default", "repo", revision), revision
    for revision in ("c-stale", "c-stale2"):
        assert not client.has_source("default", "repo", revision), revision
    trees = sorted(p.name for p in (data / "sources/default/repo").glob("*.tar.gz"))
    assert trees == ["t1.tar.gz", "t2.tar.gz", "t3.tar.gz", "t4.tar.gz"]  # t1 still serves c-head
    runs = {(p.parent.parent.parent.name, p.parent.parent.name) for p in (data / "layers").rglob("*") if p.is_file()}
    assert runs == KEPT_RUNS


def test_a_sweep_keeps_what_is_referenced_and_deletes_the_rest(cluster: ApiServer, tmp_path: Path):
    data = tmp_path / "data"
    with running_datastore(data) as url, DatastoreClient(url) as client:
        _seed(client)

        async def sweeps() -> tuple[list[str], list[str], list[str]]:
            api = await connect(str(KUBECONFIG_PATH))
            try:
                retention = Retention(FilesystemStorage(data), api, grace=timedelta(minutes=10))
                now = datetime.now(UTC)
                first = await retention.sweep(now)  # unreferenced keys start their grace period
                second = await retention.sweep(now + timedelta(minutes=10))
                third = await retention.sweep(now + timedelta(minutes=20))  # trees of deleted entries
                return first, second, third
            finally:
                await api.close()

        first, second, third = asyncio.run(sweeps())
        assert first == []
        assert second == [
            "layers/default/app/app-plan-9/1/outputs.json",
            "layers/default/app/app-plan-9/1/plan.json",
            "layers/default/app/app-plan-9/1/run.log",
            "layers/default/gone/gone-plan-1/1/plan.bin",
            "layers/default/net/net-plan-1/1/plan.bin",
            "sources/default/repo/revisions/c-stale",
            "sources/default/repo/revisions/c-stale2",
        ]
        assert third == ["sources/default/repo/t5.tar.gz"]  # its last entry went in the second pass
        _check(client, data)


def test_the_loop_runs_on_its_schedule_and_survives_a_cluster_outage(cluster: ApiServer, tmp_path: Path):
    data = tmp_path / "data"
    with running_datastore(data) as url, DatastoreClient(url) as client:
        _seed(client)

        async def run_loop() -> None:
            api = await connect(str(KUBECONFIG_PATH))
            cluster.inject_fault("GET", "terraformruns", status=503, times=1)  # the first pass is skipped
            retention = Retention(FilesystemStorage(data), api, grace=timedelta(0))
            task = asyncio.create_task(retention_loop(retention, "* * * * * *"))  # every second
            try:
                await asyncio.to_thread(
                    wait_for, lambda: not (data / "sources/default/repo/t5.tar.gz").exists(), 20, 0.05, "sweep"
                )
            finally:
                task.cancel()
                await api.close()

        asyncio.run(run_loop())
        _check(client, data)


def test_datastore_start_wires_retention(cluster: ApiServer, tmp_path: Path):
    data, port = tmp_path / "data", free_port()
    env = {**os.environ, "KUBECONFIG": str(KUBECONFIG_PATH), "BURRITO_PY_DATASTORE_AUTH_ENABLED": "false"}
    command = [sys.executable, "-m", "burrito_py.cli", "datastore", "start", "--data-dir", str(data),
               "--host", "127.0.0.1", "--port", str(port), "--retention", "--retention-schedule", "* * * * * */2",
               "--retention-grace-seconds", "0"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _healthy(url), 30, 0.05, "datastore start")
        with DatastoreClient(url) as client:
            _seed(client)
            wait_for(lambda: not (data / "sources/default/repo/t5.tar.gz").exists(), 30, 0.1, "a retention pass")
            _check(client, data)
    finally:
        process.terminate()
        output = process.communicate(timeout=30)[0].decode()
    assert "retention: deleted" in output, output


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_retention_deletes_are_seen_at_once_through_the_read_cache(cluster: ApiServer, tmp_path: Path):
    """Retention deletes through the datastore's own storage (as `datastore start` wires it), read cache included:
    an object it deletes is gone for readers at once, however long the cache's TTL."""
    data = tmp_path / "data"
    storage = read_cache_for(FilesystemStorage(data), DatastoreSettings(read_cache_ttl_seconds=3600))
    plan = "/api/v1/layers/default/app/runs/app-plan-9/plan?format=json"
    with running_datastore(data, storage=storage) as url, DatastoreClient(url) as client, \
            httpx.Client(base_url=url, timeout=30) as http:
        _seed(client)
        assert http.get(plan).content == b"{}"

        async def changed_behind_its_back() -> None:
            async def body() -> AsyncIterator[bytes]:
                yield b'{"held": false}'

            await FilesystemStorage(data).put("layers/default/app/app-plan-9/1/plan.json", body(), 100)

        asyncio.run(changed_behind_its_back())
        assert http.get(plan).content == b"{}"  # held in the cache

        async def sweep() -> list[str]:
            api = await connect(str(KUBECONFIG_PATH))
            try:
                return await Retention(storage, api, grace=timedelta(0)).sweep(datetime.now(UTC))
            finally:
                await api.close()

        assert "layers/default/app/app-plan-9/1/plan.json" in asyncio.run(sweep())
        assert http.get(plan).status_code == 404
        assert http.get("/api/v1/layers/default/app/runs/app-plan-9/attempts/1/plan?format=json").status_code == 404
