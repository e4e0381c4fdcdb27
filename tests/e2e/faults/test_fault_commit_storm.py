"""A commit storm with out-of-order committer dates (issue 11 item 1): commits made earlier (their committer
dates are in the past, older than the last plan), pushed after a sync-now plan ran. The last one is planned
and applied; the layer never has two live runs."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest

from burrito_py.api import annotations as ann
from burrito_py.timeutil import utcnow
from tests.support.git_repos import TestRepo

from ..conftest import Platform, layer_code, wait_for


def applied_inputs(platform: Platform) -> list[str]:
    state = json.loads(platform.state_file("app").read_text())
    return [i["attributes"]["input"]["value"] for r in state.get("resources", []) for i in r.get("instances", [])]


@pytest.mark.timeout(300)
def test_the_last_commit_of_a_storm_with_old_committer_dates_is_applied(platform: Platform, repo: TestRepo):
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app", auto_apply=True)
    platform.wait_state("app", "Idle", timeout=90)
    # A sync-now plan runs: the layer's plan-date is now newer than any commit made before it.
    first_plan = platform.annotations("app")[ann.PLAN_DATE]
    platform.sync_now("app")
    wait_for(lambda: platform.annotations("app").get(ann.PLAN_DATE) != first_plan, 60, what="the sync-now plan")
    platform.wait_state("app", "Idle", timeout=60)

    # Commits made an hour ago and later, in any order of dates, arriving now; unrelated ones in between.
    now = utcnow()
    offsets = [70, 65, 80, 62, 75, 61]
    for i, minutes in enumerate(offsets):
        date = now - timedelta(minutes=minutes)
        repo.commit({"layers/app/main.tf": layer_code(f"storm-{i}")}, f"storm {i}", date=date)
        last_change = repo.head
        repo.commit({"docs/README.md": f"docs {i}\n"}, f"docs {i}", date=date - timedelta(minutes=30))
        time.sleep(0.4)
    # The repository controller names as relevant the head at which it found the change: the last head (a docs
    # commit that follows the last change of the layer), or the last change itself when a poll fell between the
    # two commits (they are a moment apart; the poll runs every second).
    head = repo.head
    relevant = {head, last_change}

    max_live = 0
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        runs = platform.runs("app")
        max_live = max(max_live, sum((r.get("status") or {}).get("state") not in ("Succeeded", "Failed")
                                     for r in runs))
        a = platform.annotations("app")
        state = (platform.layer("app").get("status") or {}).get("state")
        if a.get(ann.APPLY_COMMIT) in relevant and a.get(ann.BRANCH_COMMIT) == head and state == "Idle":
            break
        time.sleep(0.2)
    layer = platform.layer("app")
    a = layer["metadata"]["annotations"]
    assert a.get(ann.BRANCH_COMMIT) == head
    assert a.get(ann.PLAN_COMMIT) in relevant, f"the last relevant commit was never planned: {layer.get('status')}"
    assert a.get(ann.APPLY_COMMIT) == a.get(ann.PLAN_COMMIT) and layer["status"]["state"] == "Idle"
    assert applied_inputs(platform) == [f"storm-{len(offsets) - 1}"]
    assert max_live <= 1
