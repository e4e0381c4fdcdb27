"""Issue 25 item 6: the emulator deletes pods gracefully, as Kubernetes does. A deleted pod its kubelet runs stays,
marked with `deletionTimestamp` and `deletionGracePeriodSeconds`, and its bound token stays valid, until its
container has stopped (SIGTERM, the grace period, SIGKILL) and the kubelet has written its final status and deleted
it with a grace period of 0. Before, the pod vanished with the DELETE: a leader controllers pod could not release its
Lease (its token died with the pod object: 401) and the standby waited for the whole lease."""

from __future__ import annotations

import json
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.identity import request_token
from burrito_local.kube_tokens import API_AUDIENCES
from burrito_local.kubelet import LocalKubelet
from burrito_local.workloads import pod_deletion_grace

from tests.support.emulator import wait_for

PODS = "/api/v1/namespaces/default/pods"

# Says it got SIGTERM, takes a second to clean up (as a leader releasing its Lease), then exits 0.
GRACEFUL = """
    import pathlib, signal, sys, time
    def stop(*_):
        pathlib.Path({marker!r}).write_text("SIGTERM")
        time.sleep(1.0)
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    while True:
        time.sleep(0.05)
"""
STUBBORN = """
    import os, pathlib, signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pathlib.Path(os.environ["TMPDIR"], "ignoring").write_text("SIGTERM ignored from now on")
    time.sleep(600)
"""


class Node:
    def __init__(self, server: ApiServer, kubelet: LocalKubelet, http: httpx.Client, tmp: Path) -> None:
        self.server, self.kubelet, self.http, self.tmp = server, kubelet, http, tmp

    def pod(self, name: str) -> dict[str, Any] | None:
        response = self.http.get(f"{PODS}/{name}")
        return response.json() if response.status_code == 200 else None

    def run(self, name: str, code: str, grace: int = 30, restart: str = "Never") -> dict[str, Any]:
        body = {"metadata": {"name": name}, "spec": {
            "restartPolicy": restart, "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "main", "image": "none", "command": [sys.executable, "-c",
                                                                         textwrap.dedent(code)]}]}}
        response = self.http.post(PODS, json=body)
        assert response.status_code == 201, response.text
        return response.json()  # type: ignore[no-any-return]

    def running(self, name: str) -> dict[str, Any]:
        return wait_for(lambda: (p := self.pod(name)) and (p.get("status") or {}).get("phase") == "Running" and p,
                        30, 0.02, f"{name} running")

    def ignoring_sigterm(self, name: str) -> None:
        self.running(name)
        wait_for(lambda: (self.kubelet.pod_root("default", name) / "tmp" / "ignoring").exists(), 30, 0.02,
                 f"{name} ignoring SIGTERM")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    from tests.conftest import KUBECONFIG_PATH

    server = ApiServer(pod_log_dir=tmp_path / "logs").start()
    kubeconfig = server.write_kubeconfig(KUBECONFIG_PATH)
    kubelet = LocalKubelet(kubeconfig, tmp_path / "logs", tmp_path / "pods", grace_seconds=5)
    kubelet.start()
    with httpx.Client(base_url=server.url, timeout=10, headers=server.admin_headers) as http:
        yield Node(server, kubelet, http, tmp_path)
    kubelet.stop()
    server.stop()


class Watcher(threading.Thread):
    """Every event of one pod, in order."""

    def __init__(self, server: ApiServer, name: str) -> None:
        super().__init__(daemon=True)
        self.url, self.headers, self.name = server.url, server.admin_headers, name
        self.events: list[tuple[str, dict[str, Any]]] = []

    def run(self) -> None:
        params = {"watch": "true", "fieldSelector": f"metadata.name={self.name}", "timeoutSeconds": "60"}
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=httpx.Timeout(10.0, read=70.0)) as http, \
                http.stream("GET", PODS, params=params) as lines:
            for line in lines.iter_lines():
                if line:
                    event = json.loads(line)
                    self.events.append((event["type"], event["object"]))
                    if event["type"] == "DELETED":
                        return


def review(node: Node, token: str) -> bool:
    answer = node.http.post("/apis/authentication.k8s.io/v1/tokenreviews", json={
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
    return bool(answer.json()["status"].get("authenticated"))


def test_a_deleted_pod_stays_with_a_valid_token_until_its_container_stopped(node: Node) -> None:
    marker = node.tmp / "sigterm"
    node.run("leader", GRACEFUL.format(marker=str(marker)))
    pod = node.running("leader")
    assert pod["spec"]["nodeName"], "the kubelet bound the pod to its node"
    token = request_token(node.http, "default", "default", list(API_AUDIENCES), pod="leader")
    watcher = Watcher(node.server, "leader")
    watcher.start()
    time.sleep(0.2)

    deleted = node.http.delete(f"{PODS}/leader")
    assert deleted.status_code == 200
    marked = deleted.json()["metadata"]
    assert marked["deletionTimestamp"] and marked["deletionGracePeriodSeconds"] == 30
    wait_for(marker.exists, 10, 0.02, "SIGTERM to reach the container")
    # During the container's own clean-up the pod is there, and its token still authenticates it.
    still = node.pod("leader")
    assert still is not None and still["metadata"].get("deletionTimestamp"), "the pod stays while it stops"
    assert review(node, token), "the bound token stays valid during the grace period"
    assert node.http.post(PODS, json={"metadata": {"name": "leader"}, "spec": {"containers": [
        {"name": "main", "image": "none"}]}}).status_code == 409, "the name stays taken"

    watcher.join(30)
    kinds = [kind for kind, _ in watcher.events]
    assert kinds[-1] == "DELETED", kinds
    final = watcher.events[-2][1]
    assert final["status"]["phase"] == "Succeeded", "the final status is written before the pod goes"
    assert final["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert node.pod("leader") is None
    assert not review(node, token), "the token dies with the pod"


def test_a_container_that_ignores_sigterm_is_killed_when_the_grace_period_ends(node: Node) -> None:
    node.run("stubborn", STUBBORN, grace=1)
    node.ignoring_sigterm("stubborn")
    started = time.monotonic()
    assert node.http.delete(f"{PODS}/stubborn").status_code == 200
    wait_for(lambda: node.pod("stubborn") is None, 20, 0.05, "the pod to go")
    assert 0.9 <= time.monotonic() - started <= 8, "killed after its 1-second grace period"


def test_a_shorter_grace_period_or_a_forced_delete_takes_it_at_once(node: Node) -> None:
    node.run("slow", STUBBORN, grace=60)
    node.ignoring_sigterm("slow")
    assert node.http.delete(f"{PODS}/slow").status_code == 200
    again = node.http.delete(f"{PODS}/slow", params={"gracePeriodSeconds": "120"})
    assert again.json()["metadata"]["deletionGracePeriodSeconds"] == 60, "a grace period is never lengthened"
    forced = node.http.delete(f"{PODS}/slow", params={"gracePeriodSeconds": "0"})
    assert forced.status_code == 200 and node.pod("slow") is None


def test_pods_no_kubelet_runs_and_ended_pods_go_at_once(node: Node, tmp_path: Path) -> None:
    with ApiServer(pod_log_dir=tmp_path / "other-logs") as bare, \
            httpx.Client(base_url=bare.url, timeout=10, headers=bare.admin_headers) as http:
        assert http.post(PODS, json={"metadata": {"name": "unbound"}, "spec": {"containers": [
            {"name": "main", "image": "none"}]}}).status_code == 201
        assert http.delete(f"{PODS}/unbound").status_code == 200
        assert http.get(f"{PODS}/unbound").status_code == 404, "never bound: no kubelet to wait for"
    node.run("done", "print('ok')")
    wait_for(lambda: ((node.pod("done") or {}).get("status") or {}).get("phase") == "Succeeded", 30, 0.02)
    assert node.http.delete(f"{PODS}/done").status_code == 200
    assert node.pod("done") is None, "an ended pod goes at once"


def test_the_grace_period_rules():
    bound = {"spec": {"nodeName": "n", "terminationGracePeriodSeconds": 120}, "status": {"phase": "Running"}}
    assert pod_deletion_grace(bound, None) == 120
    assert pod_deletion_grace(bound, 5) == 5 and pod_deletion_grace(bound, 0) == 0
    assert pod_deletion_grace({"spec": {"nodeName": "n"}, "status": {}}, None) == 30
    assert pod_deletion_grace({"spec": {}, "status": {"phase": "Running"}}, None) == 0
    assert pod_deletion_grace({**bound, "status": {"phase": "Failed"}}, None) == 0
