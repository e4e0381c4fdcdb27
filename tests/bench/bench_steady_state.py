"""Steady state (issue: core loop): 1,000 Idle layers under the real controllers against the emulator.

The controllers run as their own process (`burrito-py controllers start`), so that their peak RSS (VmHWM) is
theirs alone. Counts the API requests of a quiet window (no plan due, repository polled every 10 s) and
scales them to one drift period of burrito's default 20 minutes. Targets: <= 3 requests per layer per drift
period; controller peak RSS <= 300 MB.

Run: python3 tests/bench/bench_steady_state.py [LAYERS] [WINDOW_SECONDS]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier

from burrito_py.api import annotations as ann
from burrito_py.api.crdgen import generate_crds
from burrito_py.datastore.in_process import running_datastore
from burrito_py.timeutil import format_time, utcnow
from tests.support.git_repos import make_repo

BASE = f"/apis/{ann.API_VERSION}/namespaces/default"
DRIFT_PERIOD = 20 * 60.0


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def main(layers: int = 1000, window: float = 30.0) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="burrito-py-bench-"))
    repo = make_repo(tmp / "repo")
    head = repo.commit({"layers/app/main.tf": "terraform {}\n"}, "code")
    server = ApiServer().start()
    kubeconfig = server.write_kubeconfig(tmp / "kubeconfig")
    applier = Applier(server.url)
    for crd in generate_crds().values():
        applier.apply(crd)
    now = format_time(utcnow())
    # The head's own commit date, as the repository controller writes it: otherwise its first poll rewrites
    # every layer once, inside the measured window.
    committed = format_time(datetime.fromtimestamp(int(repo.git("log", "-1", "--format=%ct")), UTC))
    idle = {
        ann.BRANCH_COMMIT: head,
        ann.BRANCH_COMMIT_DATE: committed,
        ann.RELEVANT_COMMIT: head,
        ann.RELEVANT_COMMIT_DATE: committed,
        ann.PLAN_SUM: "sha256:x",
        ann.APPLY_SUM: "sha256:x",
        ann.PLAN_COMMIT: head,
        ann.PLAN_DATE: now,
        ann.PLAN_RUN: "none/1",
        ann.PLAN_SUMMARY: "No changes.",
    }
    with httpx.Client(base_url=server.url, timeout=30, headers=server.admin_headers) as http:
        http.post(
            f"{BASE}/terraformrepositories",
            json={"metadata": {"name": "repo"}, "spec": {"repository": {"url": repo.url}}},
        )
        for i in range(layers):
            http.post(
                f"{BASE}/terraformlayers",
                json={
                    "metadata": {"name": f"layer-{i}", "annotations": idle},
                    "spec": {"repository": {"name": "repo"}, "branch": "main", "path": "layers/app"},
                },
            )
    datastore = running_datastore(tmp / "datastore")
    datastore_url = datastore.__enter__()
    controllers = subprocess.Popen(
        [sys.executable, "-c", "from burrito_py.entry import main; main()", "controllers", "start",
         "--kubeconfig", str(kubeconfig), "--datastore-url", datastore_url, "--git-cache-dir", str(tmp / "git"),
         "--drift-detection-period", "3600", "--repository-poll-interval", "10", "--metrics-port", "0",
         "--allow-file-repositories"],  # make_repo serves a file:// URL
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Start-up: one status write per layer (first observation), then quiet.
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            states = [
                ((o.get("status") or {}).get("state"))
                for o in server.list_objects(ann.API_VERSION, "terraformlayers", "default")
            ]
            if all(s == "Idle" for s in states):
                break
            time.sleep(0.5)
        else:
            sys.exit("the layers did not all become Idle within 180 s")
        time.sleep(2)
        server.clear_requests()
        time.sleep(window)
        requests = list(server.requests)
        peak_mb = peak_rss_mb(controllers.pid)
    finally:
        controllers.terminate()
        controllers.wait(30)
    server.stop()
    datastore.__exit__(None, None, None)
    non_watch = [r for r in requests if not r.query.get("watch")]
    per_period = len(non_watch) / layers * DRIFT_PERIOD / window
    print(f"{layers} Idle layers, {window:.0f} s quiet window (repository poll 10 s):")
    print(f"  API requests: {len(non_watch)} in the window, {per_period:.3f} per layer per 20-minute drift period "
          "(target <= 3)")
    print(f"  by kind: {_by_path(non_watch)}")
    print(f"  controllers' peak RSS: {peak_mb:.0f} MB (target <= 300 MB)")


def _by_path(requests: list) -> dict[str, int]:  # type: ignore[type-arg]
    counts: dict[str, int] = {}
    for r in requests:
        key = f"{r.method} {'/'.join(r.path.split('/')[-2:])}"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1])[:6])


if __name__ == "__main__":
    main(*(int(sys.argv[1]),) if len(sys.argv) > 1 else (), *(float(sys.argv[2]),) if len(sys.argv) > 2 else ())
