"""Issue 25 item 1: a runner pod found under the attempt's name after a leader change, under the chart's real RBAC.

An old leader created attempt 1's pod and died before it recorded the attempt; the new leader's create gets 409
and reads the pod back. The chart granted the controllers `create`, `list` and `watch` on pods but not `get`, so
the read was a 403, raised out of every reconcile: the run never got a status, 43 tries in one run. Such a pod is
never adopted (a tenant who may create pods makes one just like it, §10.2): it is deleted and made again.

These tests run the run controller's own code against the emulator with the chart's rendered RBAC installed,
authenticated as the controllers' ServiceAccount by a token the API issued for it (not `--as`: the emulator
ignores impersonation, §19): the grant is what lets the adoption happen, and a 403 there (a chart edited by hand)
is a visible wait with the Lease kept, never an exception retried every 5 seconds.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier
from burrito_local.identity import admin_client, ensure_namespace, request_token, set_kubeconfig_token
from burrito_local.install import install
from burrito_local.kube_tokens import API_AUDIENCES

from burrito_py.api import annotations as ann
from burrito_py.api.crdgen import generate_crds
from burrito_py.api.run import pod_name
from burrito_py.controllers.context import Context
from burrito_py.controllers.run.leases import layer_lease_name
from burrito_py.controllers.run.reconcile import RunViewStale, reconcile_run
from burrito_py.controllers.run.runner_pod import RunnerDefaults, build_runner_pod
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.kube.client import Kube, KubeError, path

RELEASE, RELEASE_NAMESPACE = "burrito-py", "burrito-py-system"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
# Runner pods and per-layer Leases are granted in tenant namespaces only (the chart's -controllers-tenant role).
ROLE = f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{RELEASE}-controllers-tenant"


@dataclass
class ChartRbac:
    api: ApiServer
    admin: httpx.Client
    kubeconfig: Path  # authenticates as the chart's controllers ServiceAccount


@pytest.fixture
def chart_rbac(tmp_path: Path) -> Iterator[ChartRbac]:
    from burrito_py.chart.chart import render_chart

    api = ApiServer(pod_log_dir=tmp_path / "logs").start()
    admin_kubeconfig = api.write_kubeconfig(tmp_path / "admin-kubeconfig")
    applier = Applier(api.url)
    try:
        for crd in generate_crds().values():
            applier.apply(crd)
        objects = render_chart({"tenants": [{"namespace": "default", "create": False}]}, RELEASE, RELEASE_NAMESPACE)
        with admin_client(api.url) as admin:
            ensure_namespace(admin, RELEASE_NAMESPACE)
            install(applier, [o for o in objects if o["kind"] in RBAC_KINDS], RELEASE_NAMESPACE)
            token = request_token(admin, RELEASE_NAMESPACE, f"{RELEASE}-controllers", list(API_AUDIENCES))
            kubeconfig = tmp_path / "controllers-kubeconfig"
            shutil.copy(admin_kubeconfig, kubeconfig)
            set_kubeconfig_token(kubeconfig, token)
            yield ChartRbac(api, admin, kubeconfig)
    finally:
        applier.close()
        api.stop()


def _objects(admin: httpx.Client, planted: bool = False) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A repository, a layer, and an apply run whose attempt 1 pod an old leader created (as the chart's
    controllers would have made it) without recording the attempt in the run's status; `planted`: a tenant made
    it instead, dressed as the run's own."""
    base = f"/apis/{ann.API_VERSION}/namespaces/default"
    repository = admin.post(f"{base}/terraformrepositories", json={
        "apiVersion": ann.API_VERSION, "kind": "TerraformRepository", "metadata": {"name": "repo"},
        "spec": {"repository": {"url": "https://git.example.com/infra.git"}}}).raise_for_status().json()
    layer = admin.post(f"{base}/terraformlayers", json={
        "apiVersion": ann.API_VERSION, "kind": "TerraformLayer", "metadata": {"name": "app"},
        "spec": {"repository": {"name": "repo"}, "branch": "main", "path": "app"}}).raise_for_status().json()
    run = admin.post(f"{base}/terraformruns", json={
        "apiVersion": ann.API_VERSION, "kind": "TerraformRun",
        "metadata": {"name": "app-apply-1234567890", "labels": {ann.LABEL_LAYER: "app"}},
        "spec": {"action": "apply", "layer": {"name": "app", "namespace": "default", "revision": "c1"}},
    }).raise_for_status().json()
    settings = ControllerSettings()
    defaults = RunnerDefaults(settings.runner_image, settings.runner_service_account, settings.datastore_url,
                              tuple(settings.runner_command))
    pod = build_runner_pod(run, layer, 1, defaults, {})
    if planted:
        pod["spec"]["containers"][0].update(image=EVIL_IMAGE, command=["sh", "-c", "steal"])
    admin.post("/api/v1/namespaces/default/pods", json=pod).raise_for_status()
    return repository, layer, run


def _context(kube: Kube, repository: dict[str, Any], layer: dict[str, Any], run: dict[str, Any],
             grace: float = 15) -> Context:
    ctx = Context(settings=ControllerSettings(metrics_port=0, failure_grace_period=timedelta(seconds=grace)),
                  kube=kube)
    ctx.inventory.repositories.observe(repository)
    ctx.inventory.layers.observe(layer)
    ctx.inventory.runs.observe(run)
    ctx.primed = True
    return ctx


async def _reconcile_as_controllers(rbac: ChartRbac, repository: dict[str, Any], layer: dict[str, Any],
                                    run: dict[str, Any], grace: float = 15) -> Context:
    kube = await Kube.connect(str(rbac.kubeconfig))
    try:
        ctx = _context(kube, repository, layer, run, grace)
        await reconcile_run(ctx, ("default", run["metadata"]["name"]))
        return ctx
    finally:
        await kube.close()


EVIL_IMAGE = "registry.attacker.example/steal:latest"
RUNS = f"/apis/{ann.API_VERSION}/namespaces/default/terraformruns"


def _replaced(rbac: ChartRbac, repository: dict[str, Any], layer: dict[str, Any], run: dict[str, Any]) -> str:
    """Two reconciles as the chart's controllers, the second after the first's backoff: the pod found under the
    attempt's name is not adopted but deleted, then the attempt's own is made. The uid the pod first had."""
    name = run["metadata"]["name"]
    found = rbac.admin.get(f"/api/v1/namespaces/default/pods/{pod_name(name, 1)}").raise_for_status().json()
    asyncio.run(_reconcile_as_controllers(rbac, repository, layer, run, grace=1))

    status = rbac.admin.get(f"{RUNS}/{name}").json()["status"]
    assert not status.get("attempts"), f"the pod found under the attempt's name was adopted: {status.get('attempts')}"
    assert "it is never adopted; deleted" in status["podCreation"]["message"], status
    assert rbac.admin.get(f"/api/v1/namespaces/default/pods/{pod_name(name, 1)}").status_code == 404
    lease = rbac.admin.get(path("coordination.k8s.io/v1", "leases", "default", layer_lease_name(layer, run)))
    assert lease.json()["spec"]["holderIdentity"] == name, "the Lease is kept while that pod may still run"

    time.sleep(2.1)  # the backoff of one refused creation (failure grace 1 s; its time is kept to the second)
    asyncio.run(_reconcile_as_controllers(rbac, repository, layer, rbac.admin.get(f"{RUNS}/{name}").json(), grace=1))
    status = rbac.admin.get(f"{RUNS}/{name}").json()["status"]
    pod = rbac.admin.get(f"/api/v1/namespaces/default/pods/{pod_name(name, 1)}").raise_for_status().json()
    assert status["state"] == "Running", status
    assert [(a["number"], a["podName"], a.get("podUid")) for a in status["attempts"]] == [
        (1, pod_name(name, 1), pod["metadata"]["uid"])], "the run records the pod its own create made"
    assert pod["metadata"]["uid"] != found["metadata"]["uid"]
    assert pod["spec"]["containers"][0]["image"] == ControllerSettings().runner_image
    return str(found["metadata"]["uid"])


def test_the_chart_lets_a_new_leader_replace_the_pod_its_predecessor_created(chart_rbac: ChartRbac) -> None:
    """The old leader's pod has had no runner rights (the run never recorded it, §10.2): deleted and made again,
    the chart granting `get` and `delete` on pods."""
    _replaced(chart_rbac, *_objects(chart_rbac.admin))


def test_attack_a_pod_dressed_as_the_runs_own_is_never_adopted(chart_rbac: ChartRbac) -> None:
    """A tenant who may create pods (not exec into them) makes the next attempt's pod before the run does: the
    runner account, a token for burrito-py, the run label and a controller owner reference naming the run's uid,
    and their own image. Adopted, its uid became the attempt's and the datastore gave it the run's rights (its
    inputs, the layer's state, the attempt's plan)."""
    planted_uid = _replaced(chart_rbac, *_objects(chart_rbac.admin, planted=True))
    status = chart_rbac.admin.get(f"{RUNS}/app-apply-1234567890").json()["status"]
    assert planted_uid not in str(status)
    events = chart_rbac.admin.get("/api/v1/namespaces/default/events").json()["items"]
    assert any(e["reason"] == "RunnerPodCreationFailed" and "never adopted" in e["message"] for e in events), events


def test_a_403_on_the_read_back_is_a_visible_wait_that_keeps_the_lease(chart_rbac: ChartRbac) -> None:
    """A chart edited by hand (no `get` on pods): the run says why it cannot go on, a Warning says it once, the
    Lease stays with the run (its pod may be applying), and the next try is backed off, not in 5 seconds."""
    role = chart_rbac.admin.get(ROLE).json()
    for rule in role["rules"]:
        if rule.get("apiGroups") == [""] and "pods" in rule["resources"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "get"]
    chart_rbac.admin.put(ROLE, json=role).raise_for_status()
    repository, layer, run = _objects(chart_rbac.admin)
    asyncio.run(_reconcile_as_controllers(chart_rbac, repository, layer, run))  # returns: nothing raised

    name = run["metadata"]["name"]
    status = chart_rbac.admin.get(f"/apis/{ann.API_VERSION}/namespaces/default/terraformruns/{name}").json()["status"]
    creation = status["podCreation"]
    assert creation["failures"] == 1 and "already exists (409) and cannot be read: 403" in creation["message"], creation
    assert f"system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}-controllers" in creation["message"]
    cond = next(c for c in status["conditions"] if c["type"] == "RunnerPodCreated")
    assert cond["status"] == "False" and cond["reason"] == "PodCreationFailed" and "next try after" in cond["message"]
    events = chart_rbac.admin.get("/api/v1/namespaces/default/events").json()["items"]
    warnings = [e for e in events if e["involvedObject"]["name"] == name and e["type"] == "Warning"]
    assert [e["reason"] for e in warnings] == ["Forbidden"] and "cannot get resource \"pods\"" in warnings[0]["message"]
    lease = chart_rbac.admin.get(path("coordination.k8s.io/v1", "leases", "default", layer_lease_name(layer, run)))
    assert lease.status_code == 200 and lease.json()["spec"]["holderIdentity"] == name, "the Lease is kept"

    # The next reconcile (any wake-up) within the backoff asks nothing of the API about the pod.
    chart_rbac.api.clear_requests()
    fresh = chart_rbac.admin.get(f"/apis/{ann.API_VERSION}/namespaces/default/terraformruns/{name}").json()
    asyncio.run(_reconcile_as_controllers(chart_rbac, repository, layer, fresh))
    assert not [r for r in chart_rbac.api.requests if "/pods" in r.path], chart_rbac.api.requests
    again = chart_rbac.admin.get(f"/apis/{ann.API_VERSION}/namespaces/default/terraformruns/{name}").json()["status"]
    assert again["podCreation"]["failures"] == 1


def test_any_other_403_on_a_run_shows_on_the_run_and_is_not_retried_every_5_seconds(chart_rbac: ChartRbac) -> None:
    """A chart edited by hand without the per-layer Lease rights: the reconcile cannot take the Lease. The run says
    so (`Permitted=False`, the API's message) and the work queue backs off (scheduler.retry_delay)."""
    role = chart_rbac.admin.get(ROLE).json()
    role["rules"] = [r for r in role["rules"] if "leases" not in r["resources"]]
    chart_rbac.admin.put(ROLE, json=role).raise_for_status()
    repository, layer, run = _objects(chart_rbac.admin)
    with pytest.raises(KubeError) as refused:
        asyncio.run(_reconcile_as_controllers(chart_rbac, repository, layer, run))
    assert refused.value.status == 403

    name = run["metadata"]["name"]
    status = chart_rbac.admin.get(f"/apis/{ann.API_VERSION}/namespaces/default/terraformruns/{name}").json()["status"]
    cond = next(c for c in status["conditions"] if c["type"] == "Permitted")
    assert cond["status"] == "False" and cond["reason"] == "Forbidden", cond
    assert 'cannot get resource "leases"' in cond["message"] and "growing delay" in cond["message"]


def test_a_pod_the_stored_run_records_is_never_deleted_from_a_stale_view(chart_rbac: ChartRbac) -> None:
    """The status write recording attempt 1 and its pod was applied, its answer lost (a timeout), and the watch had
    not brought it yet: the retry, from the run as the inventory still had it, met its own pod (409) and deleted it,
    a pod that has runner rights and may be applying. The run as stored is read first: nothing is deleted, nothing
    written, and the reconcile is done again from the stored run."""
    repository, layer, run = _objects(chart_rbac.admin)
    name = run["metadata"]["name"]
    pod = chart_rbac.admin.get(f"/api/v1/namespaces/default/pods/{pod_name(name, 1)}").raise_for_status().json()
    attempt = {"number": 1, "podName": pod_name(name, 1), "podUid": pod["metadata"]["uid"],
               "startedAt": "2026-11-29T10:00:00Z"}
    recorded = {"state": "Running", "attempts": [attempt]}
    chart_rbac.admin.patch(f"{RUNS}/{name}/status", json={"status": recorded},
                           headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()
    with pytest.raises(RunViewStale):
        asyncio.run(_reconcile_as_controllers(chart_rbac, repository, layer, run))  # `run`: the stale view
    kept = chart_rbac.admin.get(f"/api/v1/namespaces/default/pods/{pod_name(name, 1)}")
    assert kept.status_code == 200 and kept.json()["metadata"]["uid"] == pod["metadata"]["uid"]
    stored = chart_rbac.admin.get(f"{RUNS}/{name}").json()["status"]["attempts"]
    assert [(a["number"], a["podName"], a["podUid"]) for a in stored] == [(1, attempt["podName"], attempt["podUid"])]
