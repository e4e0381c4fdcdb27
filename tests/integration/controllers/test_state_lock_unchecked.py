"""When an attempt of a managed-state layer ends, the run controller looks for a state lock its pod left
(docs/architecture.md §10.6). When the datastore cannot answer, that was a line in the controllers' log only, while
the next attempt met "Error acquiring the state lock" with nothing to say why: the layer now says so in a Warning
event `StateLockUnchecked` with the datastore's answer. Against the emulator and a real datastore client on a port
nothing listens on."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.controllers.context import Context
from burrito_py.controllers.run.state_lock import release_orphaned_lock
from burrito_py.datastore.client import DatastoreClient
from burrito_py.datastore.in_process import free_port, running_datastore
from burrito_py.kube.client import Kube
from tests.support.runner_overrides import objects, settings


async def release(kubeconfig: Path, repository: dict[str, Any], layer: dict[str, Any], url: str) -> None:
    kube = await Kube.connect(str(kubeconfig))
    store = DatastoreClient(url, timeout=2.0)
    try:
        await release_orphaned_lock(Context(settings=settings(), kube=kube, datastore=store), layer, repository)
    finally:
        store.close()
        await kube.close()


def test_a_state_lock_that_cannot_be_checked_says_so_on_the_layer(api: tuple[ApiServer, Path]) -> None:
    server, kubeconfig = api
    base = f"/apis/{ann.API_VERSION}/namespaces/default"
    repository, layer = objects("default")[:2]
    layer["spec"]["state"] = {"managed": True}
    with admin_client(server.url) as admin:
        stored = [admin.post(f"{base}/{plural}", json=body).raise_for_status().json()
                  for body, plural in ((repository, "terraformrepositories"), (layer, "terraformlayers"))]
        asyncio.run(release(kubeconfig, *stored, f"http://127.0.0.1:{free_port()}"))
        events = [e for e in admin.get("/api/v1/namespaces/default/events").json()["items"]
                  if e["involvedObject"]["name"] == "app" and e["reason"] == "StateLockUnchecked"]
    assert [e["type"] for e in events] == ["Warning"], events
    message = events[0]["message"]
    assert message.startswith("cannot check or release its state lock after an attempt ended: "), message
    assert message.endswith("; looked at again when the next attempt ends"), message


def test_a_lock_whose_runner_pod_runs_is_kept(api: tuple[ApiServer, Path], tmp_path: Path) -> None:
    """The pod is read from the API by its path: a wrong path (`/apis/pods/...`) answered 404, so every pod looked
    gone and every runner's lock was released at the next ended attempt of the layer, even while its pod ran
    Terraform (an attempt declared disappeared while its pod still ran, or another run's failed attempt)."""
    server, kubeconfig = api
    base = f"/apis/{ann.API_VERSION}/namespaces/default"
    repository, layer = objects("default")[:2]
    layer["spec"]["state"] = {"managed": True}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app-apply-1-1"},
           "spec": {"containers": [{"name": "runner", "image": "runner"}]}}
    with admin_client(server.url) as admin:
        stored = [admin.post(f"{base}/{plural}", json=body).raise_for_status().json()
                  for body, plural in ((repository, "terraformrepositories"), (layer, "terraformlayers"))]
        uid = admin.post("/api/v1/namespaces/default/pods", json=pod).raise_for_status().json()["metadata"]["uid"]
        data = tmp_path / "data"
        lock = {"id": "lock-1", "info": {"ID": "lock-1"}, "holder": "system:serviceaccount:default:runner",
                "run": "app-apply-1", "attempt": 1, "pod": "app-apply-1-1", "podUid": uid, "created": ""}
        (data / "states" / "default" / "app").mkdir(parents=True)
        (data / "states" / "default" / "app" / "lock.json").write_text(json.dumps(lock))
        with running_datastore(data) as url:
            asyncio.run(release(kubeconfig, *stored, url))
            with DatastoreClient(url) as store:
                assert (store.get_state_lock("default", "app") or {}).get("id") == "lock-1"
        events = [e for e in admin.get("/api/v1/namespaces/default/events").json()["items"]
                  if e["involvedObject"]["name"] == "app"]
    assert events == [], events
