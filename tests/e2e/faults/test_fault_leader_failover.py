"""Issue 12 items 1-2: two `burrito-py controllers start` processes with leader election, the leader SIGKILLed
again and again while layers plan and apply. The standby takes the Lease within lease + renew deadline each
time; no layer ever has two live runs or two live runner pods (sampled every 0.2 s); every attempt's log
reaches the datastore; a graceful stop hands over within 5 s; a fresh leader creates no run for Idle layers.

Short durations (lease 4 s, renew deadline 3 s, retry 0.5 s) keep this under ~2.5 minutes; the chart's
defaults (15/10/2) are measured by tests/bench/bench_failover.py.

The first two tests run on the real control plane (docs/architecture.md §22.8): the `controllers start` processes
are the test's own children, as a pod's container is the kubelet's, so SIGKILL and SIGTERM go to them by pid; they
watch the test's namespace and hold their Lease there; the second counts their requests through the fault proxy.
The third runs `burrito-py dev --mode chart` on the emulator: its real-server twin is §22.4's integration test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config

from burrito_py.api import annotations as ann
from burrito_py.datastore.client import datastore_client
from tests.support.git_repos import TestRepo, make_repo
from tests.support.real_cluster import RealCluster

from ..conftest import Platform, running_platform, wait_for

LEASE, RENEW, RETRY = 4.0, 3.0, 0.5
LEASE_NAME = "burrito-py-controllers"
LAYERS = ("a", "b", "c")
KILLS = 10

# Each generation replaces `slow`, whose provisioner keeps the apply's runner pod alive for a while: the kills
# land while runs are live.
SLOW_TF = """
terraform {
  backend "local" {}
}

variable "generation" {
  type    = string
  default = "%s"
}

resource "terraform_data" "slow" {
  input            = var.generation
  triggers_replace = var.generation

  provisioner "local-exec" {
    command = "sleep 1.5"
  }
}
"""


class Controllers:
    """One `burrito-py controllers start` process (a pod's container: restarted under the same identity)."""

    def __init__(self, identity: str, platform: Platform, workdir: Path,
                 timing: tuple[float, float, float] = (LEASE, RENEW, RETRY)) -> None:
        self.identity, self.platform, self.workdir = identity, platform, workdir
        self.timing = timing  # lease duration, renew deadline, retry period
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.health_port = free_port()

    def start(self) -> None:
        settings = self.platform.settings
        self.starts += 1
        log = (self.workdir / f"{self.identity}-{self.starts}.log").open("wb")
        namespace = self.platform.namespace
        kubeconfig = self.platform.controllers_kubeconfig or self.platform.kubeconfig  # the proxy's, if any
        env = {
            **os.environ,
            "BURRITO_PY_WEBHOOK_KEYS_NAMESPACE": namespace,  # this process's own namespace is the test's
            "BURRITO_PY_FAILURE_GRACE_PERIOD_CAP": "4s",
            "BURRITO_PY_RUNS_TO_KEEP": "1000",  # keep every run: each attempt's log is checked at the end
        }
        self.process = subprocess.Popen(
            ["burrito-py", "controllers", "start", "--kubeconfig", str(kubeconfig), "--namespace", namespace,
             "--leader-election", "--leader-election-identity", self.identity,
             "--leader-election-namespace", namespace, "--leader-election-name", LEASE_NAME,
             "--lease-duration", str(self.timing[0]), "--renew-deadline", str(self.timing[1]),
             "--retry-period", str(self.timing[2]),
             "--datastore-url", settings.datastore_url, "--git-cache-dir", str(self.workdir / f"git-{self.identity}"),
             "--drift-detection-period", "3600", "--repository-poll-interval", "1", "--failure-grace-period", "1",
             "--runner-image", "local", "--metrics-port", "0", "--no-agl", "--allow-file-repositories",
             "--host", "127.0.0.1", "--health-port", str(self.health_port)],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
        log.close()

    def health(self) -> dict[str, Any] | None:
        """/healthz when it answers 200 (a standby too: it is alive), else None."""
        try:
            response = httpx.get(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2)
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None

    def wait_campaigning(self) -> None:
        """Until the process runs and campaigns: a standby before the next kill, as a second pod would be."""
        wait_for(self.health, 60, interval=0.1, what=f"{self.identity}'s /healthz")

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def two_controllers(platform: Platform, workdir: Path, timing: tuple[float, float, float] = (LEASE, RENEW, RETRY),
                    ) -> Iterator[tuple[Controllers, Controllers]]:
    pair = (Controllers("controllers-a", platform, workdir, timing),
            Controllers("controllers-b", platform, workdir, timing))
    try:
        for c in pair:
            c.start()
        yield pair
    finally:
        for c in pair:
            c.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Leases:
    def __init__(self, kubeconfig: Path, namespace: str) -> None:
        self._client = config.new_client_from_config(config_file=str(kubeconfig))
        self._api = client.CoordinationV1Api(self._client)
        self.namespace = namespace

    def holder(self) -> str:
        try:
            lease = self._api.read_namespaced_lease(LEASE_NAME, self.namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                return ""
            raise
        return lease.spec.holder_identity or ""

    def wait_holder(self, among: set[str], timeout: float) -> tuple[str, float]:
        started = time.monotonic()
        holder = wait_for(lambda: (h if (h := self.holder()) in among else None), timeout, interval=0.05,
                          what=f"the Lease held by one of {sorted(among)}")
        return holder, time.monotonic() - started

    def close(self) -> None:
        self._client.close()


def live_runs_and_pods(platform: Platform) -> tuple[dict[str, int], dict[str, int]]:
    runs: dict[str, int] = {}
    for run in platform.runs():
        if (run.get("status") or {}).get("state") not in ("Succeeded", "Failed"):
            layer = run["spec"]["layer"]["name"]
            runs[layer] = runs.get(layer, 0) + 1
    pods: dict[str, int] = {}
    for pod in platform.core.list_namespaced_pod(platform.namespace, label_selector=ann.LABEL_LAYER).items:
        if pod.status.phase in ("Pending", "Running") and pod.metadata.deletion_timestamp is None:
            layer = pod.metadata.labels[ann.LABEL_LAYER]
            pods[layer] = pods.get(layer, 0) + 1
    return runs, pods


class Sampler(threading.Thread):
    """Every 0.2 s: the most live runs and live runner pods any one layer had."""

    def __init__(self, platform: Platform) -> None:
        super().__init__(daemon=True)
        self.platform, self.stopping = platform, threading.Event()
        self.most_runs: dict[str, int] = {}
        self.most_pods: dict[str, int] = {}
        self.samples = 0

    def run(self) -> None:
        while not self.stopping.wait(0.2):
            with contextlib.suppress(Exception):  # a slow answer is a missed sample, never a failure of the test
                runs, pods = live_runs_and_pods(self.platform)
                for layer, n in runs.items():
                    self.most_runs[layer] = max(self.most_runs.get(layer, 0), n)
                for layer, n in pods.items():
                    self.most_pods[layer] = max(self.most_pods.get(layer, 0), n)
                self.samples += 1


class Committer(threading.Thread):
    """A new generation of every layer every few seconds: plans and applies all along."""

    def __init__(self, repo: TestRepo) -> None:
        super().__init__(daemon=True)
        self.repo, self.stopping, self.generation = repo, threading.Event(), 0
        self.last = ""

    def commit(self) -> None:
        self.generation += 1
        files = {f"layers/{name}/main.tf": SLOW_TF % f"g{self.generation}" for name in LAYERS}
        self.last = self.repo.commit(files, f"generation {self.generation}")

    def run(self) -> None:
        while not self.stopping.wait(4.0):
            self.commit()


def _live_pod_exists(platform: Platform) -> bool:
    return any(live_runs_and_pods(platform)[1].values())


# Ten kill rounds, each waiting for a restarted standby and a live runner pod (on the real control plane a pod
# goes through kube-scheduler and the node's kubelet): 4-5 minutes on 2 shared cores, over the suite's 300 s.
@pytest.mark.timeout(600)
def test_leader_failover_loses_and_repeats_nothing(tmp_path: Path, real_cluster: RealCluster) -> None:
    repo = make_repo(tmp_path / "upstream")
    committer = Committer(repo)
    committer.commit()
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", start_controllers=False,
                          cluster=real_cluster) as platform, two_controllers(platform, tmp_path) as (a, b):
        leases = Leases(platform.kubeconfig, platform.namespace)
        by_identity = {a.identity: a, b.identity: b}
        leader, _ = leases.wait_holder(set(by_identity), timeout=30)
        platform.create_repository("repo", repo.url)
        for name in LAYERS:
            platform.create_layer(name, "repo", f"layers/{name}", auto_apply=True)
        sampler = Sampler(platform)
        sampler.start()
        committer.start()
        failovers: list[float] = []
        try:
            for _ in range(KILLS):
                standby = next(i for i in by_identity if i != leader)
                by_identity[standby].wait_campaigning()
                assert by_identity[standby].health() == {"identity": standby, "leader": False, "operator": "stopped"}
                wait_for(lambda: _live_pod_exists(platform), 30, interval=0.1, what="a live runner pod")
                by_identity[leader].signal(signal.SIGKILL)
                killed_at = time.monotonic()
                holder, _ = leases.wait_holder({standby}, timeout=LEASE + RENEW + 5)
                failovers.append(time.monotonic() - killed_at)
                by_identity[leader].start()  # the kubelet restarts the container: same pod, same identity
                leader = holder
            # A graceful stop hands over within 5 s.
            standby = next(i for i in by_identity if i != leader)
            by_identity[standby].wait_campaigning()
            wait_for(lambda: _live_pod_exists(platform), 30, interval=0.1, what="a live runner pod")
            by_identity[leader].process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            stopped_at = time.monotonic()
            leases.wait_holder({standby}, timeout=10)
            handover = time.monotonic() - stopped_at
            by_identity[leader].process.wait(15)  # type: ignore[union-attr]
            by_identity[leader].start()
        finally:
            committer.stopping.set()
            committer.join()
        last = committer.last
        for name in LAYERS:
            wait_for(lambda n=name: _applied(platform, n, last), 120, interval=0.5, what=f"layer {name} applied")
        sampler.stopping.set()
        sampler.join()
        leases.close()

        assert all(f <= LEASE + RENEW for f in failovers), failovers
        assert handover <= 5.0, handover
        assert sampler.samples > 100
        assert max(sampler.most_runs.values()) == 1, sampler.most_runs
        assert max(sampler.most_pods.values()) == 1, sampler.most_pods
        _every_attempt_logged(platform)
        print(f"failovers after SIGKILL: {[round(f, 2) for f in failovers]}; graceful hand-over {handover:.2f} s")


def _applied(platform: Platform, layer: str, commit: str) -> bool:
    body = platform.layer(layer)
    a = body["metadata"].get("annotations") or {}
    return (a.get(ann.APPLY_COMMIT) == commit and a.get(ann.APPLY_SUM) == a.get(ann.PLAN_SUM)
            and (body.get("status") or {}).get("state") == "Idle")


def _every_attempt_logged(platform: Platform) -> None:
    datastore = datastore_client(platform.datastore_url, None, platform.kubeconfig)
    try:
        attempts = 0
        for run in platform.runs():
            status = run.get("status") or {}
            assert status.get("state") in ("Succeeded", "Failed"), (run["metadata"]["name"], status)
            for attempt in status.get("attempts") or ():
                assert attempt.get("logsUploaded"), (run["metadata"]["name"], attempt)
                log = datastore.get_logs(platform.namespace, run["spec"]["layer"]["name"], run["metadata"]["name"],
                                         attempt["number"])
                assert log, (run["metadata"]["name"], attempt)
                attempts += 1
        assert attempts >= 2 * len(LAYERS)
    finally:
        datastore.close()


IDLE_LAYERS = 200


def test_a_fresh_leader_creates_no_run_for_idle_layers(tmp_path: Path, real_cluster: RealCluster) -> None:
    repo = make_repo(tmp_path / "upstream")
    repo.commit({"layers/app/main.tf": SLOW_TF % "g1"}, "first")
    # The controllers talk through the fault proxy: its log is the new leader's requests (and only theirs).
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", start_controllers=False, cluster=real_cluster,
                          fault_proxy=True) as platform, two_controllers(platform, tmp_path) as (a, b):
        leases = Leases(platform.kubeconfig, platform.namespace)
        namespace = platform.namespace
        by_identity = {a.identity: a, b.identity: b}
        platform.create_repository("repo", repo.url)
        platform.create_layer("seed", "repo", "layers/app", auto_apply=True)
        platform.wait_state("seed", "Idle", timeout=90)
        # 200 more layers in the seed's Idle state (its annotations: same commit, a fresh plan, applied),
        # without running 200 plans.
        seed = platform.layer("seed")
        annotations = {k: v for k, v in seed["metadata"]["annotations"].items() if k != ann.SYNC_NOW}
        for i in range(IDLE_LAYERS):
            platform.custom.create_namespaced_custom_object(ann.GROUP, ann.VERSION, namespace, "terraformlayers", {
                "apiVersion": ann.API_VERSION, "kind": "TerraformLayer",
                "metadata": {"name": f"idle-{i:03d}", "namespace": namespace, "annotations": annotations},
                "spec": seed["spec"],
            })
        wait_for(lambda: _idle_count(platform) == IDLE_LAYERS + 1, 60, interval=0.5, what="every layer Idle")
        runs_before = len(platform.runs())

        for signum in (signal.SIGTERM, signal.SIGKILL):  # a graceful hand-over, then a crash
            leader = leases.holder()
            standby = next(i for i in by_identity if i != leader)
            by_identity[standby].wait_campaigning()
            platform.faults.clear_requests()
            by_identity[leader].signal(signum)
            leases.wait_holder({standby}, timeout=LEASE + RENEW + 5)
            by_identity[leader].start()
            wait_for(lambda: any(r.method == "GET" and r.path.endswith("/terraformlayers")
                                 for r in platform.faults.requests), 10, interval=0.1, what="the new leader's listing")
            time.sleep(3)  # it has decided every layer by now: a wrong decision would have created a run
            creates = [r for r in platform.faults.requests
                       if r.method == "POST" and r.path.endswith("/terraformruns")]
            assert creates == [], (signum, creates)
            assert len(platform.runs()) == runs_before
            assert _idle_count(platform) == IDLE_LAYERS + 1
        leases.close()


def _idle_count(platform: Platform) -> int:
    items: list[dict[str, Any]] = platform.custom.list_namespaced_custom_object(
        ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers")["items"]
    return sum(1 for layer in items if (layer.get("status") or {}).get("state") == "Idle")
