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

import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.e2e.conftest import running_platform
from tests.e2e.faults.test_fault_leader_failover import Leases, chart_handovers, two_controllers

DEFAULT_TIMING = (15.0, 10.0, 2.0)


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
