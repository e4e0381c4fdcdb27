"""The whole loop with datastore auth on: runners upload with their pod-bound projected tokens, the
controllers with the kubeconfig's service account, and anonymous callers are turned away."""

from __future__ import annotations

import httpx
import pytest
from burrito_local.identity import request_token

from burrito_py.api import annotations as ann
from tests.e2e.conftest import Platform
from tests.support.emulator import wait_for
from tests.support.git_repos import TestRepo


@pytest.fixture
def platform(emulator_platform: Platform) -> Platform:
    """On the API emulator: this file is not ported to the real control plane yet (docs/architecture.md §22.6)."""
    return emulator_platform


def test_runners_and_controllers_authenticate_and_strangers_do_not(platform: Platform, repo: TestRepo):
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app")
    body = platform.wait_state("app", "ApplyNeeded")
    run, attempt = body["metadata"]["annotations"][ann.PLAN_RUN].split("/")
    plan = f"{platform.datastore_url}/api/v1/layers/default/app/runs/{run}/attempts/{attempt}/plan?format=short"
    reviews = [r for r in list(platform.api.requests) if r.path.endswith("/tokenreviews")]
    assert reviews, "the datastore never reviewed a token"

    assert httpx.get(plan).status_code == 401
    runs = platform.runs("app")
    logs = f"{platform.datastore_url}/api/v1/layers/default/app/runs/{runs[0]['metadata']['name']}/attempts/1/logs"
    with httpx.Client(base_url=platform.api.url, headers=platform.api.admin_headers) as api:
        pod = platform.pods("app")[0].metadata.name
        runner_token = request_token(api, "default", "burrito-py-runner", ["burrito-py"], pod=pod)
    as_runner = {"Authorization": f"Bearer {runner_token}"}
    assert httpx.get(plan, headers=as_runner).text.strip() == "Plan: 1 to add, 0 to change, 0 to destroy"
    # The run controller uploads the finished attempt's log with its own identity; the runner may read it.
    wait_for(lambda: httpx.get(logs, headers=as_runner).status_code == 200, 30, 0.1, "the log upload")
    other_run = f"{platform.datastore_url}/api/v1/layers/default/app/runs/not-mine/attempts/1/logs"
    assert httpx.put(other_run, content=b"x", headers=as_runner).status_code == 403
