"""The Lease protects the Terraform state (issue 11, item 8): the same path of one repository on two
branches is one state, so its layers never run Terraform at once."""

from __future__ import annotations

import time

from burrito_py.controllers.run.leases import layer_lease_name
from tests.support.git_repos import TestRepo

from .conftest import Platform, layer_code


def test_two_branches_of_one_path_never_run_at_once(platform: Platform, repo: TestRepo):
    repo.branch("feature")
    repo.commit({"layers/app/main.tf": layer_code("feature")}, "a change on the feature branch")
    repo.checkout("main")
    state = platform.workdir / "state" / "shared.tfstate"  # one backend for both: one state
    runner = {"overrideRunnerSpec": {"extraInitArgs": [f"-backend-config=path={state}"]}}
    platform.create_repository("repo", repo.url)
    platform.create_layer("app-main", "repo", "layers/app", **runner)
    platform.create_layer("app-feature", "repo", "layers/app", branch="feature", **runner)
    assert layer_lease_name(platform.layer("app-main")) == layer_lease_name(platform.layer("app-feature"))

    max_active, locked_seen = 0, False
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        active = [p for layer in ("app-main", "app-feature") for p in platform.pods(layer)
                  if p.status is None or p.status.phase in (None, "Pending", "Running")]
        max_active = max(max_active, len(active))
        for run in platform.runs():
            conditions = (run.get("status") or {}).get("conditions") or ()
            locked_seen |= any(c.get("reason") == "LayerLocked" for c in conditions)
        states = [(platform.layer(n).get("status") or {}).get("state") for n in ("app-main", "app-feature")]
        if states == ["ApplyNeeded", "ApplyNeeded"]:
            break
        time.sleep(0.05)
    assert max_active <= 1, "two runner pods worked on one state at once"
    assert states == ["ApplyNeeded", "ApplyNeeded"], states
    assert locked_seen, "one layer's run waited for the other's Lease"
