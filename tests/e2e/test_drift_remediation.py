"""Issue 13, `remediationStrategy.drift: autoIfPolicyPasses`, end to end with real terraform: a drift whose
correction only updates is applied by itself; one whose correction replaces a resource waits for a person."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.emulator import wait_for
from tests.support.git_repos import TestRepo, make_repo
from tests.support.real_cluster import RealCluster

from .conftest import Platform, running_platform

CODE = """
terraform {
  backend "local" {}
}

resource "terraform_data" "app" {
  input = "v1"
}

resource "terraform_data" "pinned" {
  input            = "p"
  triggers_replace = ["t1"]
}
"""


@pytest.fixture
def world(tmp_path: Path, real_cluster: RealCluster) -> Iterator[tuple[Platform, TestRepo]]:
    repo = make_repo(tmp_path / "upstream")
    repo.commit({"layers/app/main.tf": CODE}, "an app")
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", drift_detection_period=timedelta(seconds=10),
                          repository_poll_interval=timedelta(seconds=1), cluster=real_cluster) as platform:
        platform.create_repository("infra", repo.url)
        yield platform, repo


def edit_state(state_file: Path, name: str, attribute: str, value: Any) -> None:
    state = json.loads(state_file.read_text())
    resource = next(r for r in state["resources"] if r["name"] == name)
    resource["instances"][0]["attributes"][attribute] = value
    state["serial"] += 1
    tmp = state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(state_file)


def applies(platform: Platform) -> int:
    return sum(1 for r in platform.runs("app") if r["spec"]["action"] == "apply")


def attribute(platform: Platform, name: str, key: str) -> Any:
    """The attribute in the layer's local state file; None while terraform is writing it (its local backend
    truncates the file and writes it in place: a read in between finds it empty)."""
    try:
        state = json.loads(platform.state_file("app").read_text())
    except json.JSONDecodeError:
        return None
    return next(r for r in state["resources"] if r["name"] == name)["instances"][0]["attributes"][key]


def test_update_only_corrections_apply_and_replacements_wait(world: tuple[Platform, TestRepo]) -> None:
    platform, _ = world
    platform.create_layer("app", "infra", "layers/app", auto_apply=True, remediation={"drift": "autoIfPolicyPasses"})
    platform.wait_state("app", "Idle", 120)
    assert applies(platform) == 1

    # An update-only correction: applied without anyone, and the layer back in sync.
    edit_state(platform.state_file("app"), "app", "input", {"value": "changed outside", "type": "string"})
    wait_for(lambda: applies(platform) == 2, 90, interval=0.3, what="the update-only correction applied by itself")
    wait_for(lambda: attribute(platform, "app", "input") == {"value": "v1", "type": "string"}, 30, interval=0.3,
             what="the state corrected")

    # A correction that replaces a resource: it waits for a person, naming why.
    edit_state(platform.state_file("app"), "pinned", "triggers_replace",
               {"value": ["t0"], "type": ["tuple", ["string"]]})

    def held() -> dict[str, Any] | None:
        status = platform.layer("app").get("status") or {}
        pending = status.get("pendingPlan") or {}
        return status if status.get("state") == "ApplyNeeded" and "autoIfPolicyPasses" in pending.get(
            "reason", "") else None

    status = wait_for(held, 90, interval=0.3, what="the replacing correction held for approval")
    assert status["drift"]["state"] == "Drifted" and status["drift"]["addresses"] == ["terraform_data.pinned"]
    assert applies(platform) == 2
