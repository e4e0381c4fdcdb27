"""Figures for the real control plane (docs/architecture.md §22): the cached binary's look-up, start → ready,
resident memory at rest, clean stop, and the one-node cluster in its network namespace (start → node Ready,
a pod scheduled onto the local kubelet → its log through `kubectl logs`).

Run: python3 tests/bench/bench_controlplane.py [--rounds N]. Builds the binary first if needed; prints
medians; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout, not an installed copy

from burrito_local.controlplane import ControlPlane, ControlPlaneConfig, binary_path
from burrito_local.netns import NodeNamespace


def plain(binary: Path, rounds: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {"ready_s": [], "rss_at_rest_mb": [], "stop_s": []}
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="bench-cp-") as tmp:
            plane = ControlPlane(binary, ControlPlaneConfig(Path(tmp), unsafe_no_fsync=True)).start()
            figures["ready_s"].append(plane.ready_seconds)
            time.sleep(15)  # at rest: the controllers' first sync is over
            figures["rss_at_rest_mb"].append(plane.rss_bytes() / 2**20)
            began = time.monotonic()
            plane.stop()
            figures["stop_s"].append(time.monotonic() - began)
    return figures


def node(binary: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-netns-") as tmp, NodeNamespace(Path(tmp), binary) as cluster:
        figures = dict(cluster.timings)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hello", "namespace": "default"},
               "spec": {"restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "x", "command": ["echo", "hello"]}]}}
        kubectl = ["kubectl", f"--kubeconfig={cluster.kubeconfig}"]
        began = time.monotonic()
        subprocess.run([*kubectl, "apply", "-f", "-"], input=json.dumps(pod), text=True, check=True,
                       capture_output=True)
        while subprocess.run([*kubectl, "logs", "hello"], capture_output=True, text=True).stdout != "hello\n":
            time.sleep(0.05)
        figures["pod_created_to_log_s"] = time.monotonic() - began
        return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    began = time.monotonic()
    binary = binary_path(build=True)
    print(f"binary: {binary} ({binary.stat().st_size / 2**20:.0f} MB), found/built in {time.monotonic() - began:.2f}s")
    for name, values in plain(binary, args.rounds).items():
        each = ", ".join(f"{v:.2f}" for v in values)
        print(f"control plane {name}: median {statistics.median(values):.2f} (of {each})")
    for name, value in node(binary).items():
        print(f"node namespace {name}: {value:.2f}")


if __name__ == "__main__":
    main()
