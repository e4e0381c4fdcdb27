"""The UI's layers page at scale (issue 17): 10,000 layers in the emulator (20 namespaces of 500, with states,
results, drift and policy verdicts), the server with auth on (a token login; TokenReviews to the emulator). Times
the layers page as the server serves it (request to last byte, over loopback HTTP) for the first page, later
pages, each filter and each sort, and reports p50/p95 and the HTML size of a page. Targets: p95 <= 300 ms,
<= 200 KB per page.

Run: python3 tests/bench/bench_ui.py [LAYERS] [REQUESTS]
"""

from __future__ import annotations

import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from burrito_local.apply import Applier
from burrito_local.identity import ensure_namespace, ensure_service_account, request_token

from burrito_py.api import annotations as ann
from burrito_py.api.crdgen import generate_crds
from burrito_py.datastore.in_process import free_port
from burrito_py.server.serving import running_server
from burrito_py.server.settings import ServerSettings
from tests.support.emulator import running_apiserver

NAMESPACES = 20
STATES = ("Idle", "Idle", "Idle", "PlanNeeded", "ApplyNeeded", "Running", "MaxRetriesReached")
DRIFTS = ("InSync", "InSync", "InSync", "Drifted", "CodeChange")


def csrf_of(html: str) -> str:
    found = re.search(r'<meta name="csrf-token" content="([0-9a-f]+)">', html)
    assert found, html[:300]
    return found.group(1)


def _layer(kube: httpx.Client, namespace: str, i: int) -> None:
    name = f"layer-{i:05d}"
    base = f"/apis/{ann.API_VERSION}/namespaces/{namespace}/terraformlayers"
    kube.post(base, json={"apiVersion": ann.API_VERSION, "kind": "TerraformLayer",
                          "metadata": {"name": name, "namespace": namespace},
                          "spec": {"repository": {"name": f"repo-{i % 7}"}, "branch": "main",
                                   "path": f"stacks/{i % 13}/{name}"}}).raise_for_status()
    state = STATES[i % len(STATES)]
    status = {"state": state, "lastResult": f"Plan: {i % 5} to add, {i % 3} to change, 0 to destroy",
              "drift": {"state": DRIFTS[i % len(DRIFTS)]},
              "policy": {"planSum": "sha256:" + f"{i:064x}", "verdict": "Allowed" if i % 4 else "GatesAutoApply"}}
    if state == "ApplyNeeded":
        status["pendingPlan"] = {"sum": "sha256:" + f"{i:064x}", "run": f"{name}-plan/1"}
    kube.patch(f"{base}/{name}/status", json={"status": status},
               headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()


def main(layers: int = 10_000, requests: int = 200) -> None:
    with tempfile.TemporaryDirectory() as tmp, running_apiserver(Path(tmp), kubeconfig=Path(tmp) / "kc") as api:
        applier = Applier(api.url)
        for crd in generate_crds().values():
            applier.apply(crd)
        applier.close()
        started = time.monotonic()
        with httpx.Client(base_url=api.url, headers=api.admin_headers, timeout=60) as kube:
            namespaces = [f"team-{n:02d}" for n in range(NAMESPACES)]
            for namespace in namespaces:
                ensure_namespace(kube, namespace)
            ensure_service_account(kube, "default", "viewer")
            token = request_token(kube, "default", "viewer", ["burrito-py"])

            def create(i: int) -> None:
                with httpx.Client(base_url=api.url, headers=api.admin_headers, timeout=60) as own:
                    _layer(own, namespaces[i % NAMESPACES], i)

            with ThreadPoolExecutor(8) as pool:
                list(pool.map(create, range(layers)))
        print(f"{layers} layers created in {time.monotonic() - started:.1f} s")
        settings = ServerSettings(host="127.0.0.1", port=free_port(), kubeconfig=Path(tmp) / "kc",
                                  datastore_url="http://127.0.0.1:9", auth_enabled=True)
        with running_server(settings) as url, httpx.Client(base_url=url, timeout=60) as browser:
            form = browser.get("/ui/login")
            assert browser.post("/ui/login", data={"csrf": csrf_of(form.text), "token": token}).status_code == 303
            first = browser.get("/ui/layers")  # the index's first list and watch
            assert first.status_code == 200 and f"{layers} layers" in first.text, first.text[:300]
            views = [{}, {"page": "2"}, {"page": "100"}, {"namespace": "team-07"}, {"state": "ApplyNeeded"},
                     {"drift": "Drifted", "sort": "state"}, {"q": "stacks/3"}, {"repository": "repo-2"},
                     {"sort": "name", "dir": "desc"}, {"sort": "result"}]
            times: list[float] = []
            sizes: list[int] = []
            for n in range(requests):
                t0 = time.perf_counter()
                page = browser.get("/ui/layers", params=views[n % len(views)])
                times.append(time.perf_counter() - t0)
                assert page.status_code == 200
                sizes.append(len(page.content))
            t0 = time.perf_counter()
            approvals = browser.get("/ui/approvals")
            approvals_time = time.perf_counter() - t0
        cuts = statistics.quantiles(times, n=100)
        p50, p95 = statistics.median(times) * 1000, cuts[94] * 1000
        print(f"layers page over {requests} requests ({len(views)} views): p50 {p50:.1f} ms, p95 {p95:.1f} ms "
              f"(target <= 300 ms); HTML per page: max {max(sizes) / 1024:.1f} KB, median "
              f"{statistics.median(sizes) / 1024:.1f} KB (target <= 200 KB)")
        pending = approvals.text.count('id="approval-')
        print(f"approvals page ({pending} pending): {approvals_time * 1000:.0f} ms, "
              f"{len(approvals.content) / 1024:.0f} KB")
        if p95 > 300 or max(sizes) > 200 * 1024:
            sys.exit("over target")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
