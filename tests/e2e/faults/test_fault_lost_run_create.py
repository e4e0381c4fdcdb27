"""A run's creation whose response is lost (issue 11 item 13): the API server creates the run, the
controller sees a 500. One decision → one run: the layer finds the run the API did create (the watch shows it), or
the retry finds it under its deterministic name (409) and adopts it."""

from __future__ import annotations

import time

import pytest

from tests.support.git_repos import TestRepo

from ..conftest import Platform


@pytest.fixture
def platform(fault_platform: Platform) -> Platform:
    """On the real control plane, the controllers behind the fault proxy (docs/architecture.md §22.8)."""
    return fault_platform


def test_a_lost_create_response_makes_exactly_one_run(platform: Platform, repo: TestRepo):
    platform.faults.inject_fault("POST", r"/terraformruns$", status=500, after=True)
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app")  # manual approval: one plan run, then it waits
    platform.wait_state("app", "ApplyNeeded", timeout=90)
    time.sleep(2)  # room for a wrong controller to create a second run
    runs = platform.runs("app")
    assert [r["spec"]["action"] for r in runs] == ["plan"], [r["metadata"]["name"] for r in runs]
    creates = [r for r in platform.faults.requests if r.method == "POST" and r.path.endswith("/terraformruns")]
    assert creates, "the run was asked for"
    assert runs[0]["status"]["state"] == "Succeeded"
    # The 500 was told on the layer (issue 25: a refused create is never silent); the run the API did create is the
    # layer's run, found by the watch (or, had the watch been later than the backoff, by the retry's 409).
    reasons = [e.reason for e in platform.core.list_namespaced_event(platform.namespace).items
               if e.involved_object.name == "app"]
    assert reasons.count("RunCreationFailed") == 1, reasons
    status = platform.layer("app")["status"]
    assert "runCreation" not in status and not [c for c in status["conditions"] if c["type"] == "RunCreated"]
