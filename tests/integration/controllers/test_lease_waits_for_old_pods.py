"""A deleted run's pod still running Terraform keeps the layer's Lease from the next run (docs/architecture.md §7).

A run that applies is deleted (`kubectl delete tfrun`, or its layer deleted and made again): garbage collection
removes the run and the Lease it owns at once, but its pod stops only at the end of its grace period, or never
(`--cascade=orphan`). The layer decides again (an auto layer: the same apply) and its new run created the free
Lease, or took over the one whose holder was gone: two Terraform processes on one state. The run controller's own
reconcile against the emulator, its inventory holding the pods the API has (a pod object Running is enough).
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import httpx
import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.api.run import pod_name
from burrito_py.controllers.run.leases import layer_lease_name
from burrito_py.controllers.run.reconcile import reconcile_run
from burrito_py.kube.client import path
from tests.integration.controllers.conftest import controllers_context
from tests.support.runner_overrides import RUN, objects, runner_account

BASE = f"/apis/{ann.API_VERSION}/namespaces/default"
PODS = "/api/v1/namespaces/default/pods"
NEXT = "app-plan-2222222222"


def reconcile(kubeconfig: Path, admin: httpx.Client, stored: list[dict[str, Any]], name: str) -> None:
    """One reconcile of run `name`, the inventory holding every runner pod the API has, as the watch sees them."""
    run = admin.get(f"{BASE}/terraformruns/{name}").raise_for_status().json()
    pods = admin.get(PODS).raise_for_status().json()["items"]

    async def once() -> None:
        async with controllers_context(kubeconfig, stored, [run], pods) as ctx:
            await reconcile_run(ctx, ("default", name))

    asyncio.run(once())


def lease_holder(admin: httpx.Client, layer: dict[str, Any]) -> str | None:
    found = admin.get(path("coordination.k8s.io/v1", "leases", "default", layer_lease_name(layer)))
    return found.json()["spec"]["holderIdentity"] if found.status_code == 200 else None


@pytest.mark.parametrize("cascade", ["Background", "Orphan"])
def test_a_new_run_gets_no_pod_while_a_deleted_runs_pod_still_runs(api: tuple[ApiServer, Path],
                                                                         cascade: str) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        admin.post("/api/v1/namespaces/default/serviceaccounts", json=runner_account("default")).raise_for_status()
        repository, layer, first = objects("default", layer_override={}, repository_override={})
        stored = [admin.post(f"{BASE}/{plural}", json=body).raise_for_status().json()
                  for body, plural in ((repository, "terraformrepositories"), (layer, "terraformlayers"))]
        admin.post(f"{BASE}/terraformruns", json=first).raise_for_status()
        reconcile(kubeconfig, admin, stored, RUN)
        old_pod = pod_name(RUN, 1)
        # A node runs it (bound: its deletion waits for its grace period) and it is applying.
        admin.post(f"{PODS}/{old_pod}/binding", json={"apiVersion": "v1", "kind": "Binding",
                                                      "metadata": {"name": old_pod},
                                                      "target": {"kind": "Node", "name": "node-a"}}).raise_for_status()
        admin.patch(f"{PODS}/{old_pod}/status", json={"status": {"phase": "Running"}},
                    headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()
        assert lease_holder(admin, stored[1]) == RUN

        # The run is deleted while its pod runs Terraform. Background: garbage collection deletes its Lease at once,
        # the pod only once it stopped (its grace period); Orphan: both stay, without their owner reference.
        admin.delete(f"{BASE}/terraformruns/{RUN}", params={"propagationPolicy": cascade}).raise_for_status()
        pod = admin.get(f"{PODS}/{old_pod}").raise_for_status().json()
        assert pod["status"]["phase"] == "Running"
        assert bool(pod["metadata"].get("deletionTimestamp")) is (cascade == "Background"), pod["metadata"]
        assert lease_holder(admin, stored[1]) == (RUN if cascade == "Orphan" else None)

        second = copy.deepcopy(first)
        second["metadata"]["name"] = NEXT
        admin.post(f"{BASE}/terraformruns", json=second).raise_for_status()
        reconcile(kubeconfig, admin, stored, NEXT)

        assert admin.get(f"{PODS}/{pod_name(NEXT, 1)}").status_code == 404, "a second Terraform on the layer's state"
        status = admin.get(f"{BASE}/terraformruns/{NEXT}").json()["status"]
        admitted = next(c for c in status["conditions"] if c["type"] == "Admitted")
        assert admitted["status"] == "False" and admitted["reason"] == "LayerLocked", admitted
        assert f"waiting for runner pod {old_pod} to stop" in admitted["message"], admitted
        assert lease_holder(admin, stored[1]) == (RUN if cascade == "Orphan" else None), "the Lease was taken"

        # Once the old pod is gone, the run goes on.
        admin.delete(f"{PODS}/{old_pod}", params={"gracePeriodSeconds": "0"}).raise_for_status()
        reconcile(kubeconfig, admin, stored, NEXT)
        assert admin.get(f"{PODS}/{pod_name(NEXT, 1)}").status_code == 200
        assert lease_holder(admin, stored[1]) == NEXT
        assert admin.get(f"{BASE}/terraformruns/{NEXT}").json()["status"]["state"] == "Running"
