"""A pull request's apply whose first attempt failed, refused before its retry (docs/architecture.md §11.3, §7).

Its first attempt took the layer's own Lease (an apply before merge writes the layer's state). During the backoff
the pull request was merged. Admission then refused every next attempt (`ApplyNotAllowed`), the run waited in
Retrying forever, and the Lease stayed with it: every plan, apply and drift run of the layer waited `LayerLocked`
for good, after the merge too. Now the run fails, saying why, and the Lease goes. The run controller's own
reconcile, against the emulator."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.api.run import pod_name
from burrito_py.controllers.run.leases import layer_lease_name
from burrito_py.controllers.run.reconcile import reconcile_run
from burrito_py.timeutil import format_time, utcnow
from tests.support.runner_overrides import RUN, objects

from .conftest import controllers_context, store_run

PULL_REQUEST = "repo-pr-7"
HEAD = "c" * 40


async def _reconcile(kubeconfig: Path, stored: list[dict[str, Any]], run: dict[str, Any],
                     pull_request: dict[str, Any]) -> None:
    async with controllers_context(kubeconfig, stored, [run], pull_requests=[pull_request]) as ctx:
        await reconcile_run(ctx, ("default", RUN))


def _pull_request_apply(state: str) -> tuple[tuple[dict[str, Any], ...], dict[str, Any]]:
    """The repository, a layer locked to the pull request, its apply run (`RUN`), and the pull request in `state`."""
    repository, layer, run = objects("default")
    layer["metadata"]["annotations"] = {ann.PULL_REQUEST_LOCK: PULL_REQUEST}
    layer["spec"]["pullRequests"] = {"applyBeforeMerge": True}
    run["metadata"]["labels"][ann.LABEL_PULL_REQUEST] = ann.layer_label(PULL_REQUEST)
    run["spec"] = {"action": "apply", "pullRequest": PULL_REQUEST, "layer": {"name": "app", "revision": HEAD},
                   "artifact": {"run": "repo-pr-7-app-plan", "attempt": 1, "sum": "sha256:" + "0" * 64}}
    pull_request = {"apiVersion": ann.API_VERSION, "kind": "TerraformPullRequest",
                    "metadata": {"name": PULL_REQUEST, "namespace": "default", "resourceVersion": "1"},
                    "spec": {"state": state, "headSha": HEAD, "fromFork": False, "repository": "repo"}}
    return (repository, layer, run), pull_request


def test_a_pull_request_apply_refused_before_its_retry_fails_and_releases_the_layer(
        api: tuple[ApiServer, Path]) -> None:
    server, kubeconfig = api
    base = f"/apis/{ann.API_VERSION}/namespaces/default"
    (repository, layer, run), merged = _pull_request_apply("merged")
    with admin_client(server.url) as admin:
        failed = {"podName": pod_name(RUN, 1), "number": 1, "startedAt": format_time(utcnow() - timedelta(hours=1)),
                  "finishedAt": format_time(utcnow() - timedelta(minutes=30)), "exitCode": 1, "logsUploaded": True}
        stored, retrying = store_run(admin, (repository, layer, run),
                                     {"state": "Retrying", "retries": 1, "attempts": [failed]})
        # The Lease its first attempt took, as `leases.acquire` writes it.
        lease = layer_lease_name(stored[1], retrying)
        admin.post("/apis/coordination.k8s.io/v1/namespaces/default/leases", json={
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": lease},
            "spec": {"holderIdentity": RUN}}).raise_for_status()

        asyncio.run(_reconcile(kubeconfig, stored, retrying, merged))
        ended = admin.get(f"{base}/terraformruns/{RUN}").json()["status"]
        assert ended["state"] == "Failed", ended
        succeeded = next(c for c in ended["conditions"] if c["type"] == "HasSucceeded")
        assert succeeded["message"] == f"pull request {PULL_REQUEST} is merged: nothing is applied", succeeded
        assert len(ended["attempts"]) == 1  # no second pod
        assert admin.get(f"/api/v1/namespaces/default/pods/{pod_name(RUN, 2)}").status_code == 404
        held = admin.get(f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{lease}")
        assert held.status_code == 404 or (held.json().get("spec") or {}).get("holderIdentity") != RUN, held.text
        events = [e["reason"] for e in admin.get("/api/v1/namespaces/default/events").json()["items"]
                  if e["involvedObject"]["name"] == RUN]
        assert events == ["RunFailed"], events


def test_a_pull_request_apply_that_never_started_fails_once_the_pull_request_is_closed(
        api: tuple[ApiServer, Path]) -> None:
    """Its first attempt waited (another run held the layer's Lease) when the pull request was closed: admission
    refused it every few seconds forever, never terminal, and the pull request keeps its applies. Now it fails at
    once, saying why, and lets the layer go, even when a pod of that attempt exists (made just before a restart, its
    attempt never recorded): such a pod never had runner rights, so no Terraform of it ran."""
    server, kubeconfig = api
    base = f"/apis/{ann.API_VERSION}/namespaces/default"
    (repository, layer, run), closed = _pull_request_apply("closed")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name(RUN, 1)},
           "spec": {"containers": [{"name": "runner", "image": "runner"}]}}
    with admin_client(server.url) as admin:
        stored, waiting = store_run(admin, (repository, layer, run), {"state": "Initial", "retries": 0})
        # A pod of the first attempt exists, its attempt never recorded (a restart between the two).
        admin.post("/api/v1/namespaces/default/pods", json=pod).raise_for_status()
        asyncio.run(_reconcile(kubeconfig, stored, waiting, closed))
        ended = admin.get(f"{base}/terraformruns/{RUN}").json()["status"]
        assert ended["state"] == "Failed", ended
        succeeded = next(c for c in ended["conditions"] if c["type"] == "HasSucceeded")
        assert succeeded["message"] == f"pull request {PULL_REQUEST} is closed: nothing is applied", succeeded
        assert not ended.get("attempts")  # no pod made for it
