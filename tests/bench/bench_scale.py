"""Scale (issue 12 item 4): 10,000 Idle layers, each with its last plan and apply runs (terminal), in one
controllers process against the emulator; then the same layers split over two processes of 5,000 (one per set of
namespaces, as two shards would be).

Figures: the controllers' peak RSS (VmHWM, target <= 1 GB for 10,000), the time from the process's start to
every layer evaluated (its status written: Idle), the steady-state API requests per Idle layer per 20-minute
drift period (a quiet window scaled, target <= 3), and each half-process's RSS against the single one (target
<= 60 %). The objects are written into the emulator's store directly (the same validation and defaults as over
HTTP), so setting up 30,000 objects does not take the bench's time.

Run: python3 -m tests.bench.bench_scale [LAYERS] [WINDOW_SECONDS]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier

from burrito_py.api import annotations as ann
from burrito_py.api.crdgen import generate_crds
from burrito_py.controllers.layer.decide import CreateRun
from burrito_py.controllers.layer.runs import run_body
from burrito_py.datastore.in_process import running_datastore
from burrito_py.timeutil import format_time, utcnow
from tests.bench.bench_steady_state import peak_rss_mb
from tests.support.git_repos import make_repo

DRIFT_PERIOD = 20 * 60.0
NAMESPACES = [f"team-{i}" for i in range(10)]


def populate(server: ApiServer, repo_url: str, head: str, committed: str, layers: int) -> None:
    store = server.store
    resource = {p: store.resource(ann.GROUP, ann.VERSION, p) for p in
                ("terraformrepositories", "terraformlayers", "terraformruns")}
    namespaces = store.resource("", "v1", "namespaces")
    assert namespaces is not None and all(resource.values())
    now = format_time(utcnow())
    for namespace in NAMESPACES:
        store.create(namespaces, None, {"metadata": {"name": namespace}})
        store.create(resource["terraformrepositories"], namespace,  # type: ignore[arg-type]
                     {"metadata": {"name": "repo"}, "spec": {"repository": {"url": repo_url}}})
    for i in range(layers):
        namespace = NAMESPACES[i % len(NAMESPACES)]
        name = f"layer-{i}"
        plan_run, apply_run = f"{name}-plan-x", f"{name}-apply-x"
        annotations = {
            ann.BRANCH_COMMIT: head, ann.BRANCH_COMMIT_DATE: committed,
            ann.RELEVANT_COMMIT: head, ann.RELEVANT_COMMIT_DATE: committed,
            ann.PLAN_SUM: "sha256:x", ann.APPLY_SUM: "sha256:x", ann.PLAN_COMMIT: head, ann.PLAN_DATE: now,
            ann.PLAN_RUN: f"{plan_run}/1", ann.PLAN_SUMMARY: "No changes.",
        }
        layer = store.create(resource["terraformlayers"], namespace, {  # type: ignore[arg-type]
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"repository": {"name": "repo"}, "branch": "main", "path": "layers/app"},
        })
        for run_name, create in ((plan_run, CreateRun("plan", head, relevant_commit=head)),
                                 (apply_run, CreateRun("apply", head, plan_run, 1, relevant_commit=head,
                                                       plan_sum="sha256:x"))):
            store.create(resource["terraformruns"], namespace, run_body(layer, create, run_name))  # type: ignore[arg-type]
            store.patch(resource["terraformruns"], namespace, run_name,  # type: ignore[arg-type]
                        "application/merge-patch+json", {"status": _finished(run_name, now)}, "status")


def _finished(run: str, now: str) -> dict[str, Any]:
    return {
        "state": "Succeeded", "retries": 0, "lastRun": now, "runnerPod": f"{run}-1",
        "attempts": [{"podName": f"{run}-1", "podUid": "00000000-0000-0000-0000-000000000000", "number": 1,
                      "startedAt": now, "finishedAt": now, "logsUploaded": True, "exitCode": 0}],
        "conditions": [{"type": "HasSucceeded", "status": "True", "reason": "RunSucceeded", "message": "",
                        "lastTransitionTime": now}],
    }


def start_controllers(kubeconfig: Path, datastore_url: str, tmp: Path, namespaces: list[str],
                      tag: str, log: Path) -> subprocess.Popen[bytes]:
    flags = [arg for ns in namespaces for arg in ("--namespace", ns)]
    return subprocess.Popen(
        [sys.executable, "-c", "from burrito_py.entry import main; main()", "controllers", "start",
         "--kubeconfig", str(kubeconfig), "--datastore-url", datastore_url, "--git-cache-dir", str(tmp / f"git-{tag}"),
         "--drift-detection-period", "3600", "--repository-poll-interval", "30", "--metrics-port", "0",
         "--allow-file-repositories", "--no-agl", *flags],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        stdout=subprocess.DEVNULL, stderr=log.open("wb"),
    )


def all_evaluated(server: ApiServer, namespaces: list[str]) -> bool:
    return all(((o.get("status") or {}).get("state")) == "Idle"
               for ns in namespaces for o in server.list_objects(ann.API_VERSION, "terraformlayers", ns))


def clear_statuses(server: ApiServer) -> None:
    """Back to never evaluated, so the next process's start-up is measured the same way."""
    resource = server.store.resource(ann.GROUP, ann.VERSION, "terraformlayers")
    assert resource is not None
    for namespace in NAMESPACES:
        for layer in server.list_objects(ann.API_VERSION, "terraformlayers", namespace):
            server.store.patch(resource, namespace, layer["metadata"]["name"], "application/merge-patch+json",
                               {"status": None}, "status")


def measure(server: ApiServer, kubeconfig: Path, datastore_url: str, tmp: Path, groups: list[list[str]],
            layers: int, window: float, fresh: bool = True) -> list[tuple[float, float]]:
    """(peak RSS MB, seconds from the process's start to its every layer evaluated) per process; prints the
    steady-state request rate. `fresh`: the layers were never evaluated (each gets its first status write);
    otherwise a restart (a new leader): evaluated once each, with nothing to write."""
    if fresh:
        clear_statuses(server)
    started = time.monotonic()
    logs = [tmp / f"controllers-{len(groups)}-{i}-{fresh}.log" for i in range(len(groups))]
    processes = [start_controllers(kubeconfig, datastore_url, tmp, group, str(i), logs[i])
                 for i, group in enumerate(groups)]
    try:
        ready: dict[int, float] = {}
        deadline = started + 900
        while len(ready) < len(groups) and time.monotonic() < deadline:
            for i, group in enumerate(groups):
                if i not in ready and "start-up evaluation done" in logs[i].read_text(errors="replace") \
                        and all_evaluated(server, group):
                    ready[i] = time.monotonic() - started
            time.sleep(2.0)  # listing 10,000 layers competes with the emulator in this process
        if len(ready) < len(groups):
            sys.exit("the layers were not all evaluated within 900 s")
        time.sleep(5)
        server.clear_requests()
        time.sleep(window)
        requests = [r for r in list(server.requests) if not r.query.get("watch")]
        figures = [(peak_rss_mb(p.pid), ready[i]) for i, p in enumerate(processes)]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(60)
    per_period = len(requests) / layers * DRIFT_PERIOD / window
    print(f"  API requests in a {window:.0f} s quiet window: {len(requests)}, {per_period:.3f} per Idle layer per "
          "20-minute drift period (target <= 3)")
    return figures


def main(layers: int = 10_000, window: float = 60.0) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="burrito-py-bench-scale-"))
    repo = make_repo(tmp / "repo")
    head = repo.commit({"layers/app/main.tf": "terraform {}\n"}, "code")
    committed = format_time(datetime.fromtimestamp(int(repo.git("log", "-1", "--format=%ct")), UTC))
    server = ApiServer().start()
    kubeconfig = server.write_kubeconfig(tmp / "kubeconfig")
    applier = Applier(server.url)
    for crd in generate_crds().values():
        applier.apply(crd)
    began = time.monotonic()
    populate(server, repo.url, head, committed, layers)
    print(f"{layers} Idle layers and {2 * layers} terminal runs in {len(NAMESPACES)} namespaces "
          f"(written in {time.monotonic() - began:.0f} s)")
    with running_datastore(tmp / "datastore") as datastore_url:
        print("one process, layers never evaluated (a first status write each):")
        [(single_rss, single_start)] = measure(server, kubeconfig, datastore_url, tmp, [NAMESPACES], layers, window)
        print(f"  peak RSS {single_rss:.0f} MB (target <= 1024); start to all {layers} evaluated: "
              f"{single_start:.0f} s")
        print("one process restarted (a new leader: every layer evaluated, nothing to write):")
        [(again_rss, again_start)] = measure(server, kubeconfig, datastore_url, tmp, [NAMESPACES], layers, window,
                                             fresh=False)
        print(f"  peak RSS {again_rss:.0f} MB; start to all {layers} evaluated: {again_start:.0f} s")
        half = len(NAMESPACES) // 2
        print("two processes (namespace sets of 5):")
        split = measure(server, kubeconfig, datastore_url, tmp, [NAMESPACES[:half], NAMESPACES[half:]], layers, window)
        for i, (rss, start) in enumerate(split):
            print(f"  process {i}: peak RSS {rss:.0f} MB = {rss / single_rss:.0%} of the single one (target <= 60 %); "
                  f"start to its layers evaluated: {start:.0f} s")
    server.stop()


if __name__ == "__main__":
    main(*(int(sys.argv[1]),) if len(sys.argv) > 1 else (), *(float(sys.argv[2]),) if len(sys.argv) > 2 else ())
