"""Issue 11 item 2: a runner killed with SIGKILL in the middle of an apply (mid-replace, after Terraform
saved part of the new state) must not leave the infrastructure half-changed.

The retry finds its saved plan stale (the state moved on), the runner says so (exit 5, "stale plan: "),
the run is not retried further, and the layer re-plans at once and applies the new plan: the last commit
ends applied, with one live run at most and a bounded number of runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

from burrito_py.api import annotations as ann
from tests.support.git_repos import TestRepo, make_repo
from tests.support.real_cluster import RealCluster

from ..conftest import Platform, running_platform, wait_for

# `b` is replaced whenever `a` is; its provisioner gives the test a few seconds between "a replaced and
# saved in the state" and "b created": the moment a killed apply leaves the state half-changed.
REPLACING_TF = """
terraform {
  backend "local" {}
}

variable "generation" {
  type    = string
  default = "%s"
}

resource "terraform_data" "a" {
  input            = var.generation
  triggers_replace = var.generation
}

resource "terraform_data" "b" {
  input            = terraform_data.a.output
  triggers_replace = terraform_data.a.id

  provisioner "local-exec" {
    command = "sleep %d"
  }
}

output "b" {
  value = terraform_data.b.output
}
"""


def replacing_code(generation: str, sleep: int) -> str:
    return REPLACING_TF % (generation, sleep)


def state_inputs(state_file: Path) -> dict[str, Any]:
    state = json.loads(state_file.read_text())
    return {r["name"]: [i["attributes"]["input"]["value"] for i in r["instances"]] for r in state["resources"]}


def container_processes(run: str) -> list[int]:
    """The local kubelet's processes of a run's first attempt (the runner, terraform and its provisioner all
    inherit the pod's environment)."""
    wanted = {f"BURRITO_RUNNER_RUN={run}".encode(), b"BURRITO_RUNNER_ATTEMPT=1"}
    pids = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if wanted <= set(environ.read_bytes().split(b"\0")):
                pids.append(int(environ.parent.name))
    return pids


def live_runs(platform: Platform, layer: str) -> list[str]:
    return [r["metadata"]["name"] for r in platform.runs(layer)
            if (r.get("status") or {}).get("state") not in ("Succeeded", "Failed")]


def _watch_live_runs(platform: Platform, layer: str, stop: threading.Event, most: list[int]) -> None:
    while not stop.is_set():
        most[0] = max(most[0], len(live_runs(platform, layer)))
        stop.wait(0.2)


def test_a_runner_killed_mid_replace_ends_with_the_last_commit_applied(tmp_path: Path, real_cluster: RealCluster):
    repo: TestRepo = make_repo(tmp_path / "upstream")
    repo.commit({"layers/app/main.tf": replacing_code("g1", 0)}, "first generation")
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", runs_to_keep=10, cluster=real_cluster) as platform:
        platform.create_repository("repo", repo.url)
        platform.create_layer("app", "repo", "layers/app", auto_apply=True)
        platform.wait_state("app", "Idle", timeout=120)
        assert state_inputs(platform.state_file("app")) == {"a": ["g1"], "b": ["g1"]}

        stop, most = threading.Event(), [0]
        watcher = threading.Thread(target=_watch_live_runs, args=(platform, "app", stop, most), daemon=True)
        watcher.start()
        try:
            _kill_mid_replace_then_recover(platform, repo, most)
        finally:
            stop.set()
            watcher.join()


def _kill_mid_replace_then_recover(platform: Platform, repo: TestRepo, most: list[int]) -> None:
    last = repo.commit({"layers/app/main.tf": replacing_code("g2", 20)}, "second generation, slow b")

    def applying_pod() -> Any:
        applies = {r["metadata"]["name"] for r in platform.runs("app") if r["spec"]["action"] == "apply"}
        for pod in platform.pods("app"):
            if pod.metadata.labels.get(ann.LABEL_RUN) in applies and pod.status.phase == "Running":
                return pod
        return None

    try:
        pod = wait_for(applying_pod, 120, interval=0.2, what="the apply's runner pod running")
    except AssertionError:
        raise AssertionError(f"no apply pod: runs={[platform._run_summary(r) for r in platform.runs('app')]} "
                             f"pods={[(p.metadata.name, p.status.phase) for p in platform.pods('app')]} "
                             f"layer={platform.layer('app').get('status')}") from None

    def replaced_a() -> bool:
        state = platform.state_file("app")
        try:
            return state.exists() and state_inputs(state).get("a") == ["g2"]
        except json.JSONDecodeError:
            return False  # read while terraform rewrites it: look again

    wait_for(replaced_a, 60, interval=0.1, what="terraform to save the replaced `a` (mid-replace)")
    assert not state_inputs(platform.state_file("app")).get("b"), "b is destroyed, not yet created"
    victims = container_processes(pod.metadata.labels[ann.LABEL_RUN])
    assert victims, "the runner's processes"
    for pid in victims:  # the node dies under it: every process of the container, no SIGTERM, no clean stop
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def applied_last() -> bool:
        a = platform.annotations("app")
        return (a.get(ann.APPLY_COMMIT) == last and a.get(ann.APPLY_SUM) == a.get(ann.PLAN_SUM)
                and (platform.layer("app").get("status") or {}).get("state") == "Idle")

    wait_for(applied_last, 180, interval=0.5, what="the last commit applied after the kill")
    assert state_inputs(platform.state_file("app")) == {"a": ["g2"], "b": ["g2"]}
    assert most[0] <= 1, "never two live runs of one layer"
    runs = platform.runs("app")
    actions = [r["spec"]["action"] for r in runs]
    # g1: plan, apply; g2: plan, the killed apply, the re-plan, its apply; nothing more.
    assert actions == ["plan", "apply", "plan", "apply", "plan", "apply"], actions
    stale = runs[3]
    assert stale["metadata"]["name"] == pod.metadata.labels[ann.LABEL_RUN], "the killed run"
    conds = {c["type"]: c for c in stale["status"]["conditions"]}
    assert stale["status"]["state"] == "Failed" and conds["HasSucceeded"]["reason"] == "StalePlan"
    assert [a.get("exitCode") for a in stale["status"]["attempts"]] == [137, 5]
    assert runs[5]["status"]["state"] == "Succeeded"
