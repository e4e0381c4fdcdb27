"""Webhook latency (issue: git providers and webhooks): a signed GitHub push → the TerraformRun it causes.

5,000 layers over 50 repositories (100 layers each), all Idle; the real controllers run as their own
process with hourly polling, so only the webhook can make them fetch; the server runs in this process, the
repositories are served over smart HTTP with basic auth. Each push commits under one layer's path, pushes,
and posts the signed delivery; the clock stops when the emulator holds the new TerraformRun. No kubelet
runs: the run's pod is not part of what is measured. Reports p50/p99 over the pushes, git fetches per push
(authorized `info/refs` requests seen by the git server) and API requests per push (the emulator's log over
the push and a settle period). Targets: p50 <= 1 s, p99 <= 3 s, 1 fetch per push.

Run: python3 tests/bench/bench_webhook.py [REPOSITORIES] [LAYERS_PER_REPOSITORY] [PUSHES]
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier
from burrito_local.identity import admin_client, grant_runner_access

from burrito_py.api import annotations as ann
from burrito_py.api.crdgen import generate_crds
from burrito_py.datastore.in_process import free_port, running_datastore
from burrito_py.server.serving import running_server
from burrito_py.server.settings import ServerSettings
from burrito_py.timeutil import format_time, utcnow
from tests.support.git_repos import TestRepo, make_bare, make_repo
from tests.support.git_servers import running_http_git_server

BASE = f"/apis/{ann.API_VERSION}/namespaces/default"
USER, PASSWORD, HOOK_SECRET = "bench", "bench-Pa55", "bench-hook"
SETTLE = 1.5  # seconds after the run appears during which the push's remaining requests are counted


def idle_annotations(head: str) -> dict[str, str]:
    now = format_time(utcnow())
    return {
        ann.BRANCH_COMMIT: head, ann.BRANCH_COMMIT_DATE: now, ann.RELEVANT_COMMIT: head,
        ann.RELEVANT_COMMIT_DATE: now, ann.PLAN_SUM: "sha256:x", ann.APPLY_SUM: "sha256:x", ann.PLAN_COMMIT: head,
        ann.PLAN_DATE: now, ann.PLAN_RUN: "none/1", ann.PLAN_SUMMARY: "No changes.",
    }


def signed_push(url: str, delivery: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"ref": "refs/heads/main", "repository": {"clone_url": url}}).encode()
    digest = hmac.new(HOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return body, {"X-GitHub-Event": "push", "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": f"sha256={digest}",
                  "Content-Type": "application/json"}


def describe(method: str, path: str) -> str:
    """`PATCH terraformlayers/status` from a request path."""
    parts = path.split("/")
    resource = parts[parts.index("namespaces") + 2] if "namespaces" in parts[:-2] else parts[-1]
    return f"{method} {resource}{'/status' if path.endswith('/status') else ''}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(repositories: int = 50, per_repository: int = 100, pushes: int = 25) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="burrito-py-bench-webhook-"))
    api = ApiServer().start()
    kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
    applier = Applier(api.url)
    for crd in generate_crds().values():
        applier.apply(crd)
    secret = {k: base64.b64encode(v.encode()).decode()
              for k, v in {"username": USER, "password": PASSWORD, "webhookSecret": HOOK_SECRET,
                          "allowedHosts": "http://127.0.0.1"}.items()}
    applier.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "git", "namespace": "default"},
                   "data": secret})
    # What the Helm chart creates: the runner pods' service account (pods are created, never started here).
    with admin_client(api.url) as http:
        grant_runner_access(http, "default")
    applier.close()

    with running_http_git_server(tmp / "http", USER, PASSWORD) as git_server, \
            running_datastore(tmp / "datastore") as datastore_url:
        clones: dict[str, TestRepo] = {}
        urls: dict[str, str] = {}
        with httpx.Client(base_url=api.url, timeout=60, headers=api.admin_headers) as http:
            for r in range(repositories):
                name = f"repo-{r:02d}"
                clone = make_repo(tmp / "work" / name)
                head = clone.commit({f"layers/l{i:03d}/main.tf": "terraform {}\n" for i in range(per_repository)},
                                    "layers")
                make_bare(tmp / "http" / f"{name}.git")
                clone.push((tmp / "http" / f"{name}.git").as_uri())
                clones[name], urls[name] = clone, git_server.url_for(f"{name}.git")
                http.post(f"{BASE}/terraformrepositories", json={
                    "metadata": {"name": name},
                    "spec": {"repository": {"url": urls[name], "secretName": "git"}}})
                idle = idle_annotations(head)
                for i in range(per_repository):
                    http.post(f"{BASE}/terraformlayers", json={
                        "metadata": {"name": f"{name}-l{i:03d}", "annotations": idle},
                        "spec": {"repository": {"name": name}, "branch": "main", "path": f"layers/l{i:03d}"}})

        controllers = subprocess.Popen(
            [sys.executable, "-c", "from burrito_py.entry import main; main()", "controllers", "start",
             "--kubeconfig", str(kubeconfig), "--datastore-url", datastore_url, "--git-cache-dir", str(tmp / "git"),
             "--drift-detection-period", "36000", "--repository-poll-interval", "3600", "--metrics-port", "0",
             "--outbound-allowed-network", "127.0.0.0/8"],  # the git server listens on loopback
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        settings = ServerSettings(host="127.0.0.1", port=free_port(), kubeconfig=kubeconfig, auth_enabled=False,
                                  datastore_url=datastore_url)
        try:
            total = repositories * per_repository
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                layers = api.list_objects(ann.API_VERSION, "terraformlayers", "default")
                repos = api.list_objects(ann.API_VERSION, "terraformrepositories", "default")
                if (sum((o.get("status") or {}).get("state") == "Idle" for o in layers) == total
                        and all((o.get("status") or {}).get("state") == "Synced" for o in repos)):
                    break
                time.sleep(1)
            else:
                sys.exit("the layers did not all become Idle (and repositories Synced) within 600 s")
            time.sleep(3)
            latencies: list[float] = []
            fetches: list[int] = []
            requests: list[int] = []
            kinds: dict[str, int] = {}
            rng = random.Random(7)
            targets = rng.sample([(f"repo-{r:02d}", i) for r in range(repositories) for i in range(per_repository)],
                                 pushes)
            with running_server(settings) as server_url, httpx.Client(base_url=server_url, timeout=30) as hooks:
                for n, (name, i) in enumerate(targets):
                    clones[name].commit({f"layers/l{i:03d}/main.tf": f"terraform {{}}\n# push {n}\n"}, f"push {n}")
                    clones[name].push((tmp / "http" / f"{name}.git").as_uri())
                    layer = f"{name}-l{i:03d}"
                    api.clear_requests()
                    git_before = len(git_server.requests)
                    body, headers = signed_push(urls[name], f"bench-{n}")
                    started = time.monotonic()
                    answer = hooks.post("/api/webhook", content=body, headers=headers)
                    assert answer.status_code == 202, answer.text
                    while not any((r["metadata"].get("labels") or {}).get(ann.LABEL_LAYER) == layer
                                   for r in api.list_objects(ann.API_VERSION, "terraformruns", "default")):
                        if time.monotonic() - started > 30:
                            sys.exit(f"push {n}: no run for {layer} after 30 s")
                        time.sleep(0.002)
                    latencies.append(time.monotonic() - started)
                    time.sleep(SETTLE)
                    fetches.append(sum(1 for method, path, ok in git_server.requests[git_before:]
                                       if ok and method == "GET" and "info/refs" in path))
                    seen = [r for r in list(api.requests) if not r.query.get("watch")]
                    requests.append(len(seen))
                    kinds = {}
                    for record in seen:
                        kind = describe(record.method, record.path)
                        kinds[kind] = kinds.get(kind, 0) + 1
        finally:
            controllers.terminate()
            controllers.wait(30)
    api.stop()
    print(f"{repositories * per_repository} layers over {repositories} repositories, {pushes} signed GitHub pushes, "
          "one layer touched each:")
    print(f"  webhook -> TerraformRun created: p50 {statistics.median(latencies) * 1000:.0f} ms, "
          f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms "
          "(targets p50 <= 1 s, p99 <= 3 s)")
    print(f"  git fetches per push: median {statistics.median(fetches):.0f}, max {max(fetches)} (target 1)")
    print(f"  API requests per push (within {SETTLE} s after the run): median {statistics.median(requests):.0f}, "
          f"max {max(requests)}; last push by kind: {dict(sorted(kinds.items(), key=lambda kv: -kv[1]))}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]))
