"""Failover of the controllers' leader (issue 12 item 1) with the chart's default timing: lease 15 s, renew
deadline 10 s, retry 2 s. Two `burrito-py controllers start` processes against the emulator; the leader is
SIGKILLed (the standby must wait for the Lease to expire) or stopped with SIGTERM (it releases the Lease), and
restarted as the kubelet would. Prints the median and the range of the time from the signal to the standby
holding the Lease. Targets: SIGKILL <= 20 s, graceful stop <= 5 s.

With `--chart` (issue 25): the chart's two controllers replicas as pods of `burrito-py dev --mode chart`, the
leader's pod deleted (the emulator deletes pods gracefully, as Kubernetes does: the pod, and its token, stay while
its kubelet stops it, so it releases its Lease) or its container sent SIGTERM, alternately. Target <= 5 s each.

With `--real` (issue 25 item 6 on a real API server): the same chart on the real control plane with the local
kubelet as its Node (docs/architecture.md §22.3): the leader's pod deleted with its grace (`kubectl delete pod`),
its container sent SIGTERM, and its pod deleted with `--grace-period=0 --force` (the pod and its token go at once:
the release is refused and the standby waits for the Lease to expire), in turn. Targets: <= 5 s for the first
two; the forced deletion is the lease duration's fallback, shown for comparison.

Run: python3 -m tests.bench.bench_failover [ROUNDS] [--chart | --real]
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.conftest import running_platform, wait_for
from tests.e2e.faults.test_fault_leader_failover import Leases, two_controllers

DEFAULT_TIMING = (15.0, 10.0, 2.0)


class ChartLeaders:
    """The chart's two controllers replicas as pods of `burrito-py dev --mode chart` (their kubelet, their
    Deployment, their Lease `<release>-controllers` in the release namespace)."""

    def __init__(self, api: httpx.Client, namespace: str, release: str) -> None:
        self.api, self.namespace, self.release = api, namespace, release
        self.lease = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{release}-controllers"
        self.pods = f"/api/v1/namespaces/{namespace}/pods"

    def holder(self) -> str:
        response = self.api.get(self.lease)
        return str(response.json()["spec"].get("holderIdentity") or "") if response.status_code == 200 else ""

    def replicas(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.api.get(self.pods, params={
            "labelSelector": "app.kubernetes.io/component=controllers"}).json()["items"]
        return items

    def ready_pair(self) -> tuple[str, str] | None:
        """(leader, standby) when the Lease is held and both replicas are Ready and not being deleted."""
        def ready(pod: dict[str, Any]) -> bool:
            return not pod["metadata"].get("deletionTimestamp") and any(
                c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions")
                or ())

        names = [p["metadata"]["name"] for p in self.replicas() if ready(p)]
        leader = self.holder()
        if len(names) != 2 or leader not in names:
            return None
        return leader, next(n for n in names if n != leader)

    def wait_ready_pair(self, timeout: float = 120) -> tuple[str, str]:
        """A leader and a standby, both Ready for 3 s (the standby has looked at the Lease at least once, retry
        period 2 s; and a container just stopped by the last round shows as not Ready by then)."""
        deadline = time.monotonic() + timeout
        while True:
            pair = wait_for(self.ready_pair, max(deadline - time.monotonic(), 1), interval=0.2,
                            what="a leader and a Ready standby")
            time.sleep(3)
            if self.ready_pair() == pair:
                return pair

    def handover(self, leader: str, act: Any) -> float:
        """Seconds from `act()` to another replica holding the Lease (the standby, or the Deployment's new pod
        when it campaigns first)."""
        started = time.monotonic()
        act()
        wait_for(lambda: self.holder() not in ("", leader), 30, interval=0.05, what=f"a new holder after {leader}")
        return time.monotonic() - started

    def delete(self, pod: str) -> None:
        self.api.delete(f"{self.pods}/{pod}").raise_for_status()

    def sigterm(self, pod: str) -> None:
        """SIGTERM to the pod's container, as `kubectl exec … kill 1` or a node's runtime would send it."""
        body = self.api.get(f"{self.pods}/{pod}").json()
        container_id = body["status"]["containerStatuses"][0]["containerID"]  # local://<pid>
        os.kill(int(container_id.removeprefix("local://")), signal.SIGTERM)


def chart_handovers(rounds: int, tmp_path: Path) -> dict[str, list[float]]:
    """Leader pod deletions and SIGTERMs, alternately, in `burrito-py dev --mode chart` (chart timing 15/10/2)."""
    from burrito_local.dev import RELEASE, RELEASE_NAMESPACE, DevOptions, running_dev
    from burrito_local.identity import admin_client

    # The emulator's chart mode (SIGTERM by the pod's host pid); the real control plane's hand-over is
    # tests/integration/controlplane/test_leader_failover.py.
    options = DevOptions(data_dir=tmp_path / "dev", kubeconfig=tmp_path / "dev-kubeconfig", mode="chart",
                         cluster="emulator", controllers_replicas=2)  # the chart's leader and standby
    times: dict[str, list[float]] = {"pod deletion": [], "SIGTERM": []}
    with running_dev(options) as endpoints, admin_client(endpoints["api"]) as api:
        leaders = ChartLeaders(api, RELEASE_NAMESPACE, RELEASE)
        for _ in range(rounds):
            for how, act in (("pod deletion", leaders.delete), ("SIGTERM", leaders.sigterm)):
                leader, _ = leaders.wait_ready_pair()
                times[how].append(leaders.handover(leader, lambda a=act, pod=leader: a(pod)))
                if how == "SIGTERM":
                    # Its container restarts with the kubelet's back-off, which grows with each restart
                    # (CrashLoopBackOff): a fresh pod for the next rounds (it is not the leader any more).
                    leaders.delete(leader)
    return times


def main(rounds: int = 10) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="burrito-py-bench-failover-"))
    times: dict[str, list[float]] = {"SIGKILL": [], "SIGTERM": []}
    with running_platform(tmp / "p", tmp / "kubeconfig", start_controllers=False) as platform, \
            two_controllers(platform, tmp, DEFAULT_TIMING) as (a, b):
        leases = Leases(platform.kubeconfig)
        by_identity = {a.identity: a, b.identity: b}
        leader, _ = leases.wait_holder(set(by_identity), timeout=60)
        for signum in [signal.SIGKILL, signal.SIGTERM] * rounds:
            standby = next(i for i in by_identity if i != leader)
            by_identity[standby].wait_campaigning()
            time.sleep(DEFAULT_TIMING[2] * 1.5)  # the standby has looked at the Lease at least once
            by_identity[leader].signal(signum)
            stopped = time.monotonic()
            leader, _ = leases.wait_holder({standby}, timeout=60)
            times[signal.Signals(signum).name].append(time.monotonic() - stopped)
            by_identity[next(i for i in by_identity if i != leader)].start()
        leases.close()
    for name, target in (("SIGKILL", 20.0), ("SIGTERM", 5.0)):
        values = times[name]
        print(f"leader {name}ed: the standby leads after {statistics.median(values):.1f} s median "
              f"({min(values):.1f}-{max(values):.1f} s, {len(values)} rounds; target <= {target:.0f} s)")


def chart(rounds: int = 10) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="burrito-py-bench-failover-chart-"))
    times = chart_handovers(rounds, tmp)
    for name in ("pod deletion", "SIGTERM"):
        values = times[name]
        print(f"chart mode, leader {name}: another replica leads after {statistics.median(values):.2f} s median "
              f"({min(values):.2f}-{max(values):.2f} s, {len(values)} rounds; target <= 5 s)")


def real(rounds: int = 3) -> None:
    from burrito_local.controlplane import binary_path
    from burrito_local.netns import NodeNamespace

    from tests.integration.controlplane.test_leader_failover import chart_on_node, handovers

    tmp = Path(tempfile.mkdtemp(prefix="burrito-py-bench-failover-real-"))
    with NodeNamespace(tmp / "netns", binary_path(build=True)) as cluster, \
            chart_on_node(cluster, tmp / "chart") as leaders:
        done = handovers(leaders, ["deletion", "SIGTERM", "forced"] * rounds)
    for how, what, target in (("deletion", "leader pod deleted", "<= 5 s"),
                              ("SIGTERM", "SIGTERM to the leader's container", "<= 5 s"),
                              ("forced", "leader pod force-deleted", "the lease, 15 s, when the release is refused")):
        acquired = [h.acquired for h in done if h.how == how]
        polled = [h.polled for h in done if h.how == how]
        released = sum(h.released for h in done if h.how == how)
        print(f"real control plane, {what}: another replica leads after {statistics.median(acquired):.2f} s median "
              f"({min(acquired):.2f}-{max(acquired):.2f} s; polled {statistics.median(polled):.2f} s; "
              f"released {released} of {len(acquired)} rounds; target {target})")

if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    count = int(args[0]) if args else 10
    if "--chart" in sys.argv[1:]:
        chart(count)
    elif "--real" in sys.argv[1:]:
        real(int(args[0]) if args else 3)
    else:
        main(count)
