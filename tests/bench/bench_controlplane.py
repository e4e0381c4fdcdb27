"""Figures for the real control plane (docs/architecture.md §22): the cached binary's look-up, start → ready,
resident memory at rest and with 1,000 TerraformLayers (and their repository) stored, clean stop, and the
one-node cluster in its network namespace (start → node Ready, a pod scheduled onto the local kubelet → its log
through `kubectl logs`).

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


def with_layers(binary: Path, count: int = 1000) -> dict[str, float]:
    """RSS at rest, then with `count` TerraformLayers created (the CRDs applied; no controllers: the objects,
    kube-apiserver's watch cache and etcd alone)."""
    from burrito_py.api import annotations as ann
    from burrito_py.api.crdgen import generate_crds

    with tempfile.TemporaryDirectory(prefix="bench-cp-layers-") as tmp:
        plane = ControlPlane(binary, ControlPlaneConfig(Path(tmp), unsafe_no_fsync=True)).start()
        try:
            api = plane.admin_client()
            for crd in generate_crds().values():
                api.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            time.sleep(15)
            figures = {"rss_before_layers_mb": plane.rss_bytes() / 2**20}
            base = f"/apis/{ann.API_VERSION}/namespaces/default"
            while api.call("GET", f"{base}/terraformlayers")[0] != 200:
                time.sleep(0.2)
            api.call("POST", f"{base}/terraformrepositories", {
                "apiVersion": ann.API_VERSION, "kind": "TerraformRepository", "metadata": {"name": "repo"},
                "spec": {"repository": {"url": "https://git.example.com/infra.git"}}})
            began = time.monotonic()
            for i in range(count):
                status, body = api.call("POST", f"{base}/terraformlayers", {
                    "apiVersion": ann.API_VERSION, "kind": "TerraformLayer", "metadata": {"name": f"layer-{i:04d}"},
                    "spec": {"repository": {"name": "repo"}, "branch": "main", "path": f"layers/{i}"}})
                if status != 201:
                    raise RuntimeError(f"layer {i}: {status} {body}")
            figures["create_layers_s"] = time.monotonic() - began
            time.sleep(15)
            figures[f"rss_with_{count}_layers_mb"] = plane.rss_bytes() / 2**20
            return figures
        finally:
            plane.stop()


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
    for name, value in with_layers(binary).items():
        print(f"control plane {name}: {value:.2f}")
    for name, value in node(binary).items():
        print(f"node namespace {name}: {value:.2f}")


if __name__ == "__main__":
    main()
