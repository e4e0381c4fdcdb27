"""Attack: tenant code in a runner pod writes hundreds of MiB of log (a few lines of `local-exec` do it). When the
attempt ended, the run controller read the pod's whole log into memory (and decoded and encoded it again) to upload
it: one attempt's log in the memory every layer's reconcile shares, and gigabytes for a larger one. It now reads at
most 32 MiB (`limitBytes`), and of a longer log the last lines, which say why the attempt ended
(docs/architecture.md §6, §24).

The run controller's own reconcile, in a process of its own so its peak memory can be read, against the emulator
(which serves `pods/log` with `limitBytes` and `tailLines` as kube-apiserver does) and a real datastore.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.api.run import pod_name
from burrito_py.controllers.run.reconcile import LOG_READ_BYTES
from burrito_py.datastore.client import DatastoreClient
from burrito_py.datastore.in_process import running_datastore
from burrito_py.timeutil import format_time, utcnow
from tests.support.runner_overrides import RUN, objects

from .test_run_result_unavailable import ended_pod

ROOT = Path(__file__).resolve().parents[3]
LINE = b"x" * (1024 * 1024 - 1) + b"\n"
LAST_WORDS = b"the attempt's last words: why it ended\n"

CHILD = """
import asyncio, json, resource, sys
from pathlib import Path
from tests.integration.controllers.conftest import reconcile_run_once

given = json.loads(Path(sys.argv[1]).read_text())
asyncio.run(reconcile_run_once(Path(given["kubeconfig"]), given["stored"], given["run"], given["pod"], given["url"]))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def _reconcile_in_a_process(workdir: Path, kubeconfig: Path, stored: list[dict], run: dict, url: str) -> int:
    """One reconcile of the run in a fresh process; its peak resident memory in bytes."""
    given = workdir / "given.json"
    given.write_text(json.dumps({"kubeconfig": str(kubeconfig), "stored": stored, "run": run,
                                 "pod": ended_pod(run), "url": url}))
    done = subprocess.run([sys.executable, "-c", CHILD, str(given)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.strip().splitlines()[-1])


def test_attack_a_runner_writing_hundreds_of_mib_of_log_cannot_fill_the_controllers_memory(
        api: tuple[ApiServer, Path], tmp_path: Path) -> None:
    server, kubeconfig = api
    base = f"/apis/{ann.API_VERSION}/namespaces/default"
    pod = pod_name(RUN, 1)
    log = tmp_path / "logs" / "default" / pod / "runner.log"  # where the emulator serves the pod's log from
    log.parent.mkdir(parents=True)
    with log.open("wb") as handle:
        for _ in range(256):
            handle.write(LINE)
        handle.write(LAST_WORDS)
    with admin_client(server.url) as admin, running_datastore(tmp_path / "datastore") as url:
        stored = [admin.post(f"{base}/{plural}", json=body).raise_for_status().json()
                  for body, plural in zip(objects("default"), ("terraformrepositories", "terraformlayers",
                                                               "terraformruns"), strict=True)]
        admin.post("/api/v1/namespaces/default/pods", json={
            "metadata": {"name": pod, "namespace": "default"},
            "spec": {"containers": [{"name": "runner", "image": "runner"}]}}).raise_for_status()
        attempt = {"podName": pod, "number": 1, "startedAt": format_time(utcnow() - timedelta(minutes=1)),
                   "podUid": "pod-uid", "logsUploaded": False}
        run = admin.patch(f"{base}/terraformruns/{RUN}/status", json={"status": {
            "state": "Running", "retries": 0, "attempts": [attempt]}},
            headers={"Content-Type": "application/merge-patch+json"}).raise_for_status().json()

        peak = _reconcile_in_a_process(tmp_path, kubeconfig, stored, run, url)
        status = admin.get(f"{base}/terraformruns/{RUN}").json()["status"]
        with DatastoreClient(url) as store:
            kept = store.get_logs("default", "app", RUN, 1)
    # Before: the whole 256 MiB read, decoded, encoded and cut again: 1.4 GiB at its peak. Now ~310 MiB, the
    # process's own and a few copies of the 32 MiB it reads.
    assert peak < 600 * 1024 * 1024, f"the controller's peak memory was {peak / 2**20:.0f} MiB"
    assert status["attempts"][0]["logsUploaded"] is True, status
    assert len(kept) <= LOG_READ_BYTES
    assert kept.startswith(b"(the beginning of this log was not collected: the attempt wrote more than ")
    assert kept.endswith(LAST_WORDS)
