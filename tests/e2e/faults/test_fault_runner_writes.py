"""Faults on the runner's writes (issue 11, items 2 and 4), end to end: the real control plane (the controllers
behind the fault proxy, tests/support/fault_proxy.py), the local kubelet as its Node running real
`burrito-py runner start` processes with real terraform, the datastore and the controllers.

- One injected 500 on the layer PATCH that records a plan's or an apply's result (the run controller's since
  issue 24: the runner writes nothing to the API), before the write or after it (a lost response): the layer
  ends Idle with apply-sum == plan-sum, terraform applied exactly once, and no attempt was lost.
- kill -9 of the runner mid-replace (terraform and its provisioner included, as a container's SIGKILL would
  be): the retry attempt either finds the plan applied and succeeds, or exits 5 with "stale plan: …". What the
  layer does after a StalePlan (plan again, then apply) is the layer helper's part of issue 11 and is checked
  once both branches are merged; this file asserts the runner's side only.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from burrito_py.api import annotations as ann
from tests.support.git_repos import TestRepo

from ..conftest import Platform, wait_for


@pytest.fixture
def platform(fault_platform: Platform) -> Platform:
    """On the real control plane, the controllers behind the fault proxy (docs/architecture.md §22.8)."""
    return fault_platform


LAYER_PATH = "/terraformlayers/app$"


def _apply_completions(platform: Platform) -> int:
    """"Apply complete!" lines over every pod log of the test (each apply terraform really ran prints one)."""
    logs = platform.pod_logs
    assert logs is not None
    return sum(path.read_text(errors="replace").count("Apply complete!") for path in logs.rglob("*") if path.is_file())


def _live_run(platform: Platform, action: str) -> dict[str, Any] | None:
    for run in platform.runs("app"):
        if run["spec"]["action"] == action and (run.get("status") or {}).get("state") not in ("Succeeded", "Failed"):
            return run
    return None


@pytest.mark.parametrize("after", [False, True], ids=["before-write", "lost-response"])
@pytest.mark.parametrize("action", ["plan", "apply"])
def test_one_500_on_the_runner_layer_patch(platform: Platform, repo: TestRepo, action: str, after: bool) -> None:
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app", auto_apply=True)
    wait_for(lambda: _live_run(platform, action), 60, interval=0.05, what=f"a {action} run")
    seen = len(platform.faults.requests)
    platform.faults.inject_fault("PATCH", LAYER_PATH, status=500, after=after)

    layer = platform.wait_state("app", "Idle", timeout=120)
    a = layer["metadata"]["annotations"]
    assert a[ann.APPLY_SUM] == a[ann.PLAN_SUM] and a[ann.APPLY_COMMIT] == repo.head
    patches = [r for r in platform.faults.requests[seen:]
               if r.method == "PATCH" and r.path.endswith("/terraformlayers/app")]
    assert len(patches) >= 2, "the injected fault was never hit"  # the refused call and its retry
    assert _apply_completions(platform) == 1
    runs = platform.runs("app")
    assert [r["spec"]["action"] for r in runs] == ["plan", "apply"]
    assert all(r["status"]["state"] == "Succeeded" for r in runs)
    assert all(int(r["status"].get("retries") or 0) == 0 for r in runs), "one 500 must not cost an attempt"


SLOW_REPLACE = """
terraform {
  backend "local" {}
}

variable "message" {
  type    = string
  default = "%s"
}

resource "terraform_data" "this" {
  triggers_replace = var.message
  input            = var.message

  provisioner "local-exec" {
    command = "sleep 5"
  }
}
"""


def _runner_processes(platform: Platform, run: str) -> list[int]:
    """Pids of the runner of `run` in the test's namespace and everything it started (they share its
    environment; the session's kubelet runs every test's pods)."""
    wanted = {f"BURRITO_RUNNER_RUN={run}".encode(), f"BURRITO_RUNNER_LAYER_NAMESPACE={platform.namespace}".encode()}
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted <= set(environ):
            pids.append(int(entry.name))
    return pids


def _provisioner_running(platform: Platform, pids: list[int]) -> bool:
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"sleep"):
                return True
        except OSError:
            continue
    return False


def test_kill_9_of_the_runner_mid_replace(platform: Platform, repo: TestRepo) -> None:
    repo.commit({"layers/app/main.tf": SLOW_REPLACE % "v1"}, "slow replace")
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app", auto_apply=True)
    platform.wait_state("app", "Idle", timeout=120)
    repo.commit({"layers/app/main.tf": SLOW_REPLACE % "v2"}, "replace it")

    apply_run = wait_for(lambda: next((r for r in platform.runs("app") if r["spec"]["action"] == "apply"
                                       and r["spec"]["layer"]["revision"] == repo.head), None),
                         120, interval=0.1, what="the apply run of v2")
    name = apply_run["metadata"]["name"]
    pids = wait_for(lambda: (p := _runner_processes(platform, name)) and _provisioner_running(platform, p) and p,
                    120, interval=0.05, what="the replace's provisioner")
    for pid in pids:  # the whole container: the runner, terraform and the provisioner
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def retried() -> dict[str, Any] | None:
        run = next(r for r in platform.runs("app") if r["metadata"]["name"] == name)
        status = run.get("status") or {}
        return run if status.get("state") in ("Succeeded", "Failed") and int(status.get("retries") or 0) >= 1 else None

    run = wait_for(retried, 120, interval=0.2, what=f"run {name} to end after a retry")
    pods = sorted(platform.pods("app"), key=lambda p: p.metadata.creation_timestamp)
    attempts = [p for p in pods if (p.metadata.labels or {}).get(ann.LABEL_RUN) == name]
    assert len(attempts) >= 2
    last = attempts[-1].status.container_statuses[0].state.terminated
    assert last is not None
    print(f"after kill -9 mid-replace: run {run['status']['state']}, retry exit {last.exit_code}: {last.message}")
    if run["status"]["state"] == "Succeeded":  # the kill came before terraform wrote the state: applied now
        assert last.exit_code == 0
        a = platform.annotations("app")
        assert a[ann.APPLY_SUM] == a[ann.PLAN_SUM] and a[ann.APPLY_COMMIT] == repo.head
    else:  # the state moved on: the saved plan is stale, and the runner says so
        assert last.exit_code == 5, last.message
        assert (last.message or "").startswith("stale plan: ")
