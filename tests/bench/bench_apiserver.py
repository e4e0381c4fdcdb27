"""Figures for the Kubernetes API emulator: start-up time and sustained write rate with a watcher.

Run: python3 tests/bench/bench_apiserver.py [--objects N]. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout, not an installed copy

import httpx
from burrito_local.apiserver import ApiServer

CMS = "/api/v1/namespaces/default/configmaps"


def startup(rounds: int) -> list[float]:
    durations = []
    for _ in range(rounds):
        began = time.perf_counter()
        server = ApiServer().start()
        durations.append(time.perf_counter() - began)
        server.stop()
    return durations


def writes(count: int) -> dict[str, float]:
    with ApiServer() as server, httpx.Client(base_url=server.url, headers=server.admin_headers) as http:
        seen = 0
        done = threading.Event()
        ready = threading.Event()

        def watch() -> None:
            nonlocal seen
            with httpx.stream("GET", server.url + CMS, params={"watch": "true"}, timeout=120,
                              headers=server.admin_headers) as response:
                ready.set()
                for line in response.iter_lines():
                    if line and json.loads(line)["type"] in ("ADDED", "MODIFIED"):
                        seen += 1
                        if seen == 2 * count:
                            done.set()
                            return

        threading.Thread(target=watch, daemon=True).start()
        ready.wait(10)
        began = time.perf_counter()
        for i in range(count):
            http.post(CMS, json={"metadata": {"name": f"cm-{i}", "labels": {"bench": "yes"}}, "data": {"i": str(i)}})
        created = time.perf_counter()
        for i in range(count):
            http.patch(f"{CMS}/cm-{i}", json={"data": {"patched": "yes"}},
                       headers={"Content-Type": "application/merge-patch+json"})
        patched = time.perf_counter()
        done.wait(60)
        delivered = time.perf_counter()
        list_began = time.perf_counter()
        listed = http.get(CMS, params={"labelSelector": "bench=yes"}).json()["items"]
        list_time = time.perf_counter() - list_began
        get_began = time.perf_counter()
        for i in range(200):
            http.get(f"{CMS}/cm-{i}")
        get_time = (time.perf_counter() - get_began) / 200
        assert len(listed) == count
        return {
            "creates_per_s": count / (created - began),
            "patches_per_s": count / (patched - created),
            "writes_per_s": 2 * count / (patched - began),
            "watch_lag_after_last_write_ms": (delivered - patched) * 1000,
            "watch_events_seen": float(seen),
            "list_ms": list_time * 1000,
            "get_ms": get_time * 1000,
        }


def authorized_gets(bindings: int, count: int) -> dict[str, float]:
    """Single gets per second as the admin (system:masters) and as a service account whose one RoleBinding
    sits among `bindings` others (RBAC evaluated on every request)."""
    from burrito_local.identity import request_token
    from burrito_local.kube_tokens import API_AUDIENCES

    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/default"
    with ApiServer() as server, httpx.Client(base_url=server.url, headers=server.admin_headers) as admin:
        admin.post(f"{rbac}/roles", json={"metadata": {"name": "reader"}, "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]})
        for i in range(bindings + 1):
            admin.post(f"{rbac}/rolebindings", json={
                "metadata": {"name": f"b{i}"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                           "name": "reader"},
                "subjects": [{"kind": "ServiceAccount", "name": f"sa{i}", "namespace": "default"}]})
        admin.post("/api/v1/namespaces/default/serviceaccounts", json={"metadata": {"name": f"sa{bindings}"}})
        admin.post(CMS, json={"metadata": {"name": "cm"}})
        token = request_token(admin, "default", f"sa{bindings}", list(API_AUDIENCES))
        rates = {}
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}) as account:
            for label, client in (("admin", admin), ("service_account", account)):
                assert client.get(f"{CMS}/cm").status_code == 200
                began = time.perf_counter()
                for _ in range(count):
                    client.get(f"{CMS}/cm")
                rates[label] = count / (time.perf_counter() - began)
        return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    times = startup(args.rounds)
    print(f"start-up: median {statistics.median(times) * 1000:.2f} ms, max {max(times) * 1000:.2f} ms "
          f"over {args.rounds} start/stop")
    figures = writes(args.objects)
    print(f"{args.objects} creates then {args.objects} merge patches, one client, one watcher:")
    print(f"  creates/s {figures['creates_per_s']:.0f}, patches/s {figures['patches_per_s']:.0f}, "
          f"all writes/s {figures['writes_per_s']:.0f}")
    print(f"  watch events seen {figures['watch_events_seen']:.0f}, lag after the last write "
          f"{figures['watch_lag_after_last_write_ms']:.1f} ms")
    print(f"  list of {args.objects} by label {figures['list_ms']:.1f} ms, single get {figures['get_ms']:.2f} ms")
    rates = authorized_gets(1000, 1000)
    print(f"gets/s, one client: as the admin {rates['admin']:.0f}, as a service account with 1 of 1001 "
          f"RoleBindings {rates['service_account']:.0f}")


if __name__ == "__main__":
    main()
