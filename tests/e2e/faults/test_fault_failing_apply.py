"""An apply that always fails, under a short drift period (issue 11 items 2, 3 and issue 25 item 2): one plan run
per drift period at most, the first apply (and its stale re-plan) and no other, never a second apply of a plan
whose apply failed nor of a later plan making the same changes (even once run-history cleanup has deleted that
run), and the failure visible as a condition and events."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.decide import MAX_STALE_REPLANS
from burrito_py.controllers.run.decide import STALE_PLAN_EXIT_CODE
from burrito_py.timeutil import parse_time
from tests.support.emulator import wait_for
from tests.support.git_repos import TestRepo, make_repo
from tests.support.real_cluster import RealCluster

from ..conftest import Platform, running_platform

# Plans always succeed (with changes); the apply always fails: the provisioner runs only when the resource is
# created, at apply time, and a failed create leaves it tainted, so the next plan replaces it again. No
# provider to download (terraform_data and local-exec are built in).
FAILING_APPLY_TF = """
terraform {
  backend "local" {}
}

resource "terraform_data" "this" {
  input = "always fails"

  provisioner "local-exec" {
    command = "echo this apply always fails >&2; exit 1"
  }
}
"""


@dataclass
class Tally:
    """What a watcher saw of a layer's runs (run history deletes old runs, so it samples as it goes)."""

    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_live: int = 0
    states: set[str] = field(default_factory=set)

    def of(self, action: str) -> list[dict[str, Any]]:
        return [r for r in self.runs.values() if r["spec"]["action"] == action]

    def attempts(self) -> int:
        return sum(len((r.get("status") or {}).get("attempts") or ()) for r in self.runs.values())


def watch(platform: Platform, layer: str, seconds: float, interval: float = 0.3) -> Tally:
    tally = Tally()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        runs = platform.runs(layer)
        for run in runs:
            tally.runs[run["metadata"]["name"]] = run  # the latest view of each run
        live = [r for r in runs if (r.get("status") or {}).get("state") not in ("Succeeded", "Failed")]
        tally.max_live = max(tally.max_live, len(live))
        tally.states.add(str((platform.layer(layer).get("status") or {}).get("state")))
        time.sleep(interval)
    return tally


def history(tally: Tally) -> list[str]:
    """Every run seen, in creation order, one line each: what a failure needs to be read (pytest cuts long reprs)."""
    def created(run: dict[str, Any]) -> str:
        return str(run["metadata"].get("annotations", {}).get(ann.RUN_CREATED_AT, ""))

    lines = []
    for run in sorted(tally.runs.values(), key=created):
        annotations = run["metadata"].get("annotations") or {}
        status = run.get("status") or {}
        exits = [a.get("exitCode") for a in status.get("attempts") or ()]
        lines.append(f"{created(run)} {run['metadata']['name']} {run['spec']['action']} "
                     f"sum={annotations.get(ann.RUN_PLAN_SUM, '-')[:19]} state={status.get('state')} exits={exits}")
    return lines


def failing_repo(tmp_path: Path) -> TestRepo:
    repo = make_repo(tmp_path / "upstream")
    repo.commit({"layers/app/main.tf": FAILING_APPLY_TF}, "an apply that always fails")
    return repo


# The drift period, and the watch: nine periods. What is asserted is counted in periods, so a short period
# proves the same as a long one (20 s made the watch three minutes; at 10 s, 9 plan runs and 2 applies in 90 s).
PERIOD = 10.0
WATCH = 9 * PERIOD


@pytest.fixture
def drifting(tmp_path: Path, real_cluster: RealCluster) -> Iterator[Platform]:
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", drift_detection_period=timedelta(seconds=PERIOD),
                          max_retries=1, cluster=real_cluster) as platform:
        yield platform


@pytest.mark.timeout(420)
def test_an_always_failing_apply_is_bounded_and_visible(drifting: Platform, tmp_path: Path):
    """Issue 25 item 2: each drift check makes a new plan with a new sum, which used to lift the apply's exhaustion:
    the layer applied (and failed) once per drift period, forever. Now a plan making the same changes at the same
    commit and inputs is not applied again: the first apply and its retries, plus the one immediate re-plan of a
    stale retry (§5.1), then none, while drift checks go on planning."""
    platform, repo = drifting, failing_repo(tmp_path)
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app", auto_apply=True)
    started = time.monotonic()
    tally = watch(platform, "app", WATCH)
    elapsed = time.monotonic() - started

    plans, applies = tally.of("plan"), tally.of("apply")
    assert tally.max_live <= 1
    # One plan run per drift period at most (+1: the first plan), and one apply run per plan sum. Drift checks
    # come on the layer's beat, never less than half a period after the last plan (§5.3); the one exception is
    # the re-plan at once after an apply refused as stale, once per relevant commit (§5.1).
    created = sorted(t for r in plans if (t := parse_time(r["metadata"]["annotations"][ann.RUN_CREATED_AT])))
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(created)]
    at_once = [gap for gap in gaps if gap < PERIOD / 2 - 1]
    assert len(at_once) <= 1, gaps
    assert 4 <= len(plans) - len(at_once) <= elapsed / PERIOD + 1, gaps  # drift checks went on all along
    sums = [r["metadata"]["annotations"][ann.RUN_PLAN_SUM] for r in applies]
    # The first apply, and the apply of the re-plan its stale retry asked for: never one per drift check. Which
    # applies ended stale is read from their attempts (exit code 5), not from the plans' gaps: on a loaded machine
    # the re-plan "at once" can come more than a few seconds after the plan before it.
    stale = [r for r in applies if any(a.get("exitCode") == STALE_PLAN_EXIT_CODE
                                       for a in (r.get("status") or {}).get("attempts") or ())]
    assert 1 <= len(applies) <= 1 + min(len(stale), MAX_STALE_REPLANS) and len(sums) == len(set(sums)), \
        "\n".join(history(tally))
    last_apply = max(parse_time(r["metadata"]["annotations"][ann.RUN_CREATED_AT]) for r in applies)
    later_plans = [t for t in created if t > last_apply]
    assert len(later_plans) >= 3, (created, last_apply)  # three drift plans and more after it, none applied
    assert all((r.get("status") or {}).get("state") in ("Failed", "Running", "Initial", "Retrying",
                                                       "FailureGracePeriod", None) for r in applies)
    # Run history (5 runs) deleted the oldest runs; none of their plans' changes was applied again.
    assert len(tally.runs) > 5

    # The failure is visible: the state, the retry-limit condition (saying why the new plans are not applied) and
    # events, the Warning once, not once per drift check.
    assert "MaxRetriesReached" in tally.states
    layer = platform.wait_state("app", "MaxRetriesReached", timeout=60)
    exhausted = (layer.get("status") or {}).get("exhaustedApply")
    # The failed create leaves a tainted resource in the state, so a retry of the same plan is refused as stale
    # (runner exit 5): the apply ends on the retry limit or on a stale plan, both recorded with their reason.
    assert exhausted is not None and exhausted["reason"] in ("RetryLimitReached", "StalePlan"), exhausted
    assert exhausted["key"] in set(sums) and exhausted.get("changesDigest", "").startswith("sha256:"), exhausted
    retry = next(c for c in layer["status"]["conditions"] if c["type"] == "HasLastRunReachedRetryLimit")
    assert retry["status"] == "True" and "would make the same changes" in retry["message"], retry

    def reasons_now() -> list[tuple[str, str]]:
        events = platform.core.list_namespaced_event(platform.namespace).items
        return [(e.involved_object.name, e.reason) for e in events]

    def warned_runs() -> list[str]:
        """The run each MaxRetriesReached Warning names (`run <name>: <result>`)."""
        events = platform.core.list_namespaced_event(platform.namespace).items
        return [str(e.message).split(":")[0].removeprefix("run ") for e in events
                if e.involved_object.name == "app" and e.reason == "MaxRetriesReached"]

    # The Warning is posted after the status write that shows the state: waited for, then counted.
    wait_for(lambda: ("app", "MaxRetriesReached") in reasons_now(), 30, interval=0.5,
             what="the MaxRetriesReached event")
    reasons, warned = reasons_now(), warned_runs()
    # Told once per failed apply run (the first, refused as stale, and the apply of its re-plan are two), never
    # at each drift check.
    assert 1 <= len(warned) == len(set(warned)) <= len(applies) < len(plans), (warned, "\n".join(history(tally)))
    assert set(warned) <= {r["metadata"]["name"] for r in applies}, (warned, "\n".join(history(tally)))
    assert any(reason == "RunFailed" and name.startswith("app-apply-") for name, reason in reasons)
    print(f"\n{elapsed:.0f} s: {len(plans)} plan runs, {len(applies)} apply runs, {tally.attempts()} attempts")
