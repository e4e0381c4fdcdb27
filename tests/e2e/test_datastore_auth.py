"""The whole loop with datastore auth on: runners upload with their pod-bound projected tokens, the
controllers with the kubeconfig's service account, and anonymous callers are turned away."""

from __future__ import annotations

import httpx
from burrito_local.identity import request_token

from burrito_py.api import annotations as ann
from tests.e2e.conftest import Platform
from tests.support.emulator import wait_for
from tests.support.git_repos import TestRepo


def test_runners_and_controllers_authenticate_and_strangers_do_not(platform: Platform, repo: TestRepo):
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app")
    body = platform.wait_state("app", "ApplyNeeded")
    run, attempt = body["metadata"]["annotations"][ann.PLAN_RUN].split("/")
    layer = f"{platform.datastore_url}/api/v1/layers/{platform.namespace}/app"
    plan = f"{layer}/runs/{run}/attempts/{attempt}/plan?format=short"

    assert httpx.get(plan).status_code == 401
    runs = platform.runs("app")
    logs = f"{layer}/runs/{runs[0]['metadata']['name']}/attempts/1/logs"
    with platform.api_http() as api:
        pod = platform.pods("app")[0].metadata.name
        runner_token = request_token(api, platform.namespace, "burrito-py-runner", ["burrito-py"], pod=pod)
    as_runner = {"Authorization": f"Bearer {runner_token}"}
    assert httpx.get(plan, headers=as_runner).text.strip() == "Plan: 1 to add, 0 to change, 0 to destroy"
    # The datastore cannot check a token's signature itself: kube-apiserver's TokenReview refuses a forged one.
    header, claims, signature = runner_token.split(".")
    forged = f"{header}.{claims}.{signature[::-1]}"
    assert httpx.get(plan, headers={"Authorization": f"Bearer {forged}"}).status_code == 401
    # The run controller uploads the finished attempt's log with its own identity; the runner may read it.
    wait_for(lambda: httpx.get(logs, headers=as_runner).status_code == 200, 30, 0.1, "the log upload")
    other_run = f"{layer}/runs/not-mine/attempts/1/logs"
    assert httpx.put(other_run, content=b"x", headers=as_runner).status_code == 403
