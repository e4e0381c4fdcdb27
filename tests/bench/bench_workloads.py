"""Figures for workloads on the emulator: Deployment create → Available (2 replicas of a small Python HTTP
server; with an HTTP readiness probe of periodSeconds 1, and without a probe), and the kubelet's (plus
controller manager's) memory per running pod, measured as this process's RSS growth over 20 pods.

Run: python3 tests/bench/bench_workloads.py [--rounds N]. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout, not an installed copy

import httpx

from tests.support.emulator import running_cluster, wait_for

SERVER = ("import http.server, sys\n"
          "class H(http.server.BaseHTTPRequestHandler):\n"
          "    def do_GET(self):\n"
          "        self.send_response(200); self.send_header('Content-Length', '0'); self.end_headers()\n"
          "    def log_message(self, *a): pass\n"
          "http.server.ThreadingHTTPServer((sys.argv[1], 8080), H).serve_forever()\n")


def deployment(name: str, replicas: int, probe: bool, code: str = SERVER) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "web", "image": "python", "command": [sys.executable, "-c", code], "args": ["$(POD_IP)"],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "http", "containerPort": 8080}]}
    if probe:
        container["readinessProbe"] = {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]}}}}


def available(http: httpx.Client, ns: str, name: str) -> bool:
    status = http.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}").json().get("status") or {}
    return any(c["type"] == "Available" and c["status"] == "True" for c in status.get("conditions") or ())


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pods", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, running_cluster(Path(tmp), grace_seconds=1) as cluster, \
            httpx.Client(base_url=cluster.api.url, timeout=10, headers=cluster.api.admin_headers) as http:
        for probe in (True, False):
            times = []
            for i in range(args.rounds):
                ns = f"bench-{int(probe)}-{i}"
                http.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).raise_for_status()
                began = time.perf_counter()
                http.post(f"/apis/apps/v1/namespaces/{ns}/deployments", json=deployment("web", 2, probe))
                wait_for(lambda ns=ns: available(http, ns, "web"), 60, 0.005)
                times.append(time.perf_counter() - began)
                http.delete(f"/api/v1/namespaces/{ns}")
            label = "with readiness probe (periodSeconds 1)" if probe else "without probe"
            print(f"deployment of 2 create → Available, {label}: median {statistics.median(times):.3f}s "
                  f"(min {min(times):.3f}s, max {max(times):.3f}s, n={len(times)})")
        time.sleep(2)
        before = rss_kib()
        http.post("/api/v1/namespaces", json={"metadata": {"name": "rss"}}).raise_for_status()
        sleeper = "import time; time.sleep(3600)"
        http.post("/apis/apps/v1/namespaces/rss/deployments", json=deployment("idle", args.pods, False, sleeper))
        wait_for(lambda: available(http, "rss", "idle"), 120, 0.05)
        time.sleep(2)
        after = rss_kib()
        print(f"kubelet + controller manager RSS per running pod: {(after - before) / args.pods:.0f} KiB "
              f"({before} KiB → {after} KiB over {args.pods} pods; the pods' own processes not included)")


if __name__ == "__main__":
    main()
