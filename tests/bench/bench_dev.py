"""`burrito-py dev --example quickstart` from start to the first layer Idle: on the real control plane (the
default; the chart installed into kube-apiserver, the kubelet its node, in a network namespace), chart mode on
the emulator (controllers, datastore and server as pods under their own service accounts, RBAC enforced) and
in-process mode on the emulator (the same components as threads of the dev process), alternating the three in
one run; then the resident memory of each component pod at rest and the RBAC rules per component.

    python3 tests/bench/bench_dev.py [ROUNDS]      # default 5
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from burrito_local.dev import RELEASE, RELEASE_NAMESPACE

from burrito_py.chart.chart import render_chart
from burrito_py.chart.rbac import grants_per_component

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
# Distinct (apiGroup, resource, verb) grants of burrito's chart per component, counted from padok-team/burrito
# deploy/charts/burrito/templates/rbac-controllers.yaml (91e224c), rbac-runner.yaml and rbac-server.yaml
# (4811aaa); its datastore gets system:auth-delegator (tokenreviews and subjectaccessreviews create).
BURRITO_RULES = {"controllers": 76, "runner": 6, "server": 42, "datastore": 2}


VARIANTS = {"real": ("real", "chart"), "chart": ("emulator", "chart"), "in-process": ("emulator", "in-process")}


def first_idle(variant: str, keep: dict[str, int] | None = None) -> float:
    cluster, mode = VARIANTS[variant]
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "burrito_py.cli", "dev", "--example", "quickstart", "--mode", mode,
             "--cluster", cluster, "--data-dir", str(data), "--kubeconfig", str(data / "kubeconfig")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        assert process.stdout is not None
        try:
            for line in process.stdout:
                if re.search(r"layer default/hello\s+Idle", line):
                    elapsed = time.monotonic() - started
                    break
            else:
                raise RuntimeError(f"dev ({variant}) ended before hello was Idle")
            if keep is not None:
                time.sleep(10)  # at rest
                keep.update(component_rss(process.pid))
            return elapsed
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(60)


def component_rss(root_pid: int) -> dict[str, int]:
    """RSS (KiB) of each component process under the dev process, by its `burrito-py <component> start`."""
    out: dict[str, int] = {}
    tree = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,rss=,args="], capture_output=True, text=True).stdout
    for line in tree.splitlines():
        pid, _ppid, rss, args = line.split(None, 3)
        match = re.search(r"burrito-py (controllers|datastore|server) start", args)
        if match and int(pid) != os.getpid():
            out[match.group(1)] = out.get(match.group(1), 0) + int(rss)
    return out


def main() -> None:
    times: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    rss: dict[str, int] = {}
    for round_ in range(ROUNDS):
        for variant in VARIANTS:
            times[variant].append(first_idle(variant, rss if (variant == "chart" and round_ == 0) else None))
            print(f"round {round_ + 1} {variant:10s} first Idle after {times[variant][-1]:.1f}s", flush=True)
    real, chart, local = (statistics.median(times[v]) for v in VARIANTS)
    print(f"dev start → first layer Idle, median of {ROUNDS}: real control plane {real:.1f}s, emulator chart "
          f"{chart:.1f}s, emulator in-process {local:.1f}s; chart/in-process {chart / local:.2f} (target ≤ 1.3), "
          f"real/emulator chart {real / chart:.2f}")
    print("RSS at rest (MiB):", json.dumps({k: round(v / 1024, 1) for k, v in sorted(rss.items())}))
    ours = grants_per_component(render_chart({}, RELEASE, RELEASE_NAMESPACE), RELEASE)
    for component in sorted(set(ours) | set(BURRITO_RULES)):
        print(f"RBAC rules {component:12s} burrito-py {ours.get(component, 0):3d}   burrito "
              f"{BURRITO_RULES.get(component, '-')}")


if __name__ == "__main__":
    main()
