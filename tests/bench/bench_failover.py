"""Failover of the controllers' leader (issue 12 item 1) with the chart's default timing: lease 15 s, renew
deadline 10 s, retry 2 s. Two `burrito-py controllers start` processes against the emulator; the leader is
SIGKILLed (the standby must wait for the Lease to expire) or stopped with SIGTERM (it releases the Lease), and
restarted as the kubelet would. Prints the median and the range of the time from the signal to the standby
holding the Lease. Targets: SIGKILL <= 20 s, graceful stop <= 5 s.

Run: python3 -m tests.bench.bench_failover [ROUNDS]
"""

from __future__ import annotations

import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.e2e.conftest import running_platform
from tests.e2e.faults.test_fault_leader_failover import Leases, two_controllers

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


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
