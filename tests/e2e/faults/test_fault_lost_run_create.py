"""A run's creation whose response is lost (issue 11 item 13): the API server creates the run, the
controller sees a 500. One decision → one run: the retry finds the run under its deterministic name (409)
and adopts it."""

from __future__ import annotations

import time

from burrito_py.gitops.testing import TestRepo

from ..conftest import Platform


def test_a_lost_create_response_makes_exactly_one_run(platform: Platform, repo: TestRepo):
    platform.api.inject_fault("POST", r"/terraformruns$", status=500, after=True)
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app")  # manual approval: one plan run, then it waits
    platform.wait_state("app", "ApplyNeeded", timeout=90)
    time.sleep(2)  # room for a wrong controller to create a second run
    runs = platform.runs("app")
    assert [r["spec"]["action"] for r in runs] == ["plan"], [r["metadata"]["name"] for r in runs]
    creates = [r for r in platform.api.requests if r.method == "POST" and r.path.endswith("/terraformruns")]
    assert len(creates) >= 2, "the lost response must have been retried"
    assert runs[0]["status"]["state"] == "Succeeded"
