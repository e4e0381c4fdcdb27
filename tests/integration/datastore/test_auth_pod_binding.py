"""Issue 11, item 14 (security): a runner token writes a run's artifacts only when it is bound to the pod the run
controller created for the run's current attempt (name and uid), running as the account it gave that pod. Real
TokenRequests and TokenReviews of the emulator, real pods and runs, the datastore over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from burrito_local.identity import ensure_service_account

from burrito_py.api import annotations as ann
from burrito_py.api.runner_secrets import RUNNER_SERVICE_ACCOUNT
from tests.integration.datastore.auth_platform import NS, AuthPlatform, running_auth_platform


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthPlatform]:
    # Its own platform: these tests change runs' statuses, which the matrix's expectations depend on.
    with running_auth_platform(tmp_path_factory.mktemp("binding")) as p:
        yield p


def put_plan(
    platform: AuthPlatform, token: str, run: str = "app-plan-1", attempt: int = 1, layer: str = "app"
) -> httpx.Response:
    return httpx.put(f"{platform.url}/api/v1/layers/{NS}/{layer}/runs/{run}/attempts/{attempt}/plan?format=bin",
                     content=b"forged plan", headers={"Authorization": f"Bearer {token}"}, timeout=30.0)


def test_a_pod_owned_by_the_run_but_running_as_default_cannot_upload_its_plan(platform: AuthPlatform):
    """A pod naming the run as its controller, under another account, that the run controller never recorded."""
    response = put_plan(platform, platform.tokens["default-sa-pod"])
    assert response.status_code == 403
    error = response.json()["error"]
    assert "system:serviceaccount:default:default may not use the datastore" in error
    assert "pod default/app-plan-1-7 is not the current runner pod of run app-plan-1" in error


def test_a_run_the_controller_ran_as_an_opened_account_uploads_its_plan(platform: AuthPlatform):
    """The run controller runs a layer's pod as the account its `overrideRunnerSpec` names once the account's
    writers opened it to runners (§6.3): that pod, recorded as the run's attempt, is its runner. The datastore used
    to refuse every account but the two platform ones, so such a run failed each upload with 403."""
    http = platform.http
    ensure_service_account(http, NS, "deployer")
    http.patch(f"/api/v1/namespaces/{NS}/serviceaccounts/deployer",
               json={"metadata": {"annotations": {RUNNER_SERVICE_ACCOUNT: "true"}}},
               headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()
    run = "other-plan-deployer"  # a run of its own: the module's other tests read the others' statuses
    http.post(f"/apis/{ann.API_VERSION}/namespaces/{NS}/terraformruns", json={
        "apiVersion": ann.API_VERSION, "kind": "TerraformRun",
        "metadata": {"name": run, "namespace": NS, "labels": {ann.LABEL_LAYER: "other"}},
        "spec": {"action": "plan", "layer": {"name": "other"}}}).raise_for_status()
    pod = platform.create_runner_pod(run, 1, account="deployer")
    token = platform.runner_token(pod["metadata"]["name"], account="deployer")
    assert put_plan(platform, token, run, 1, "other").status_code == 503  # not recorded yet
    platform.record_attempts(run, pod)
    response = put_plan(platform, token, run, 1, "other")
    assert response.status_code in (200, 201), response.text
    # The same account's token bound to a pod the run never recorded is still refused.
    stray = platform.create_runner_pod(run, 6, account="deployer")
    refused = put_plan(platform, platform.runner_token(stray["metadata"]["name"], account="deployer"), run, 1,
                       "other")
    assert refused.status_code == 403
    assert f"is not the current runner pod of run {run}" in refused.json()["error"]


def test_the_pod_of_a_previous_attempt_cannot_upload(platform: AuthPlatform):
    response = put_plan(platform, platform.tokens["previous-attempt"], run="app-plan-0")
    assert response.status_code == 403
    assert response.json()["error"].endswith(
        "pod default/app-plan-0-1 is not the current runner pod of run app-plan-0 "
        "(its current runner pod is app-plan-0-2)"
    )


def test_a_runner_pod_the_run_does_not_record_cannot_upload(platform: AuthPlatform):
    # A runner-SA pod controlled by the run, under a name no attempt of the run has.
    pod = platform.create_runner_pod("other-plan-1", 5)
    response = put_plan(platform, platform.runner_token(pod["metadata"]["name"]), "other-plan-1", 5, "other")
    assert response.status_code == 403
    assert "is not the current runner pod of run other-plan-1 (its current runner pod is other-plan-1-1)" in (
        response.json()["error"]
    )


def test_a_pod_recreated_under_the_recorded_name_is_not_the_recorded_pod(platform: AuthPlatform):
    # Run app-plan-0 records app-plan-0-2 with a uid; a pod deleted and created again under that name differs.
    http = platform.http
    recorded = http.get(f"/apis/{ann.API_VERSION}/namespaces/{NS}/terraformruns/app-plan-0").json()
    http.delete(f"/api/v1/namespaces/{NS}/pods/app-plan-0-2").raise_for_status()
    again = platform.create_runner_pod("app-plan-0", 2)
    assert again["metadata"]["uid"] != recorded["status"]["attempts"][-1]["podUid"]
    response = put_plan(platform, platform.runner_token("app-plan-0-2"), run="app-plan-0", attempt=2)
    assert response.status_code == 403
    assert f"has uid {recorded['status']['attempts'][-1]['podUid']}, not {again['metadata']['uid']}" in (
        response.json()["error"]
    )


def test_the_next_attempts_pod_waits_until_the_run_records_it_then_works(platform: AuthPlatform):
    """The controller creates the pod, then records it in the run's status: a runner that calls in between gets
    a retryable 503 (never cached), and the same token works once the status names its pod."""
    first = platform.http.get(f"/api/v1/namespaces/{NS}/pods/app-plan-1-1").json()
    second = platform.create_runner_pod("app-plan-1", 2)
    token = platform.runner_token(second["metadata"]["name"])
    early = put_plan(platform, token, attempt=2)
    assert early.status_code == 503
    assert "run app-plan-1 does not record pod default/app-plan-1-2 yet" in early.json()["error"]
    platform.record_attempts("app-plan-1", first, second)
    assert put_plan(platform, token, attempt=2).status_code == 201
    # …and the first attempt's pod has lost its write rights to the run.
    assert put_plan(platform, platform.tokens["own-runner"]).status_code == 403


def test_a_run_records_pods_by_name_only_when_it_had_to_adopt_one(platform: AuthPlatform):
    """Attempts recorded without a uid (a pod adopted after a 409) bind by name: the token's pod uid is still
    checked against the live pod by the TokenReview."""
    pod = platform.create_runner_pod("other-plan-1", 3)
    platform.http.patch(
        f"/apis/{ann.API_VERSION}/namespaces/{NS}/terraformruns/other-plan-1/status",
        json={"status": {"attempts": [{"podName": "other-plan-1-3", "number": 3}], "runnerPod": "other-plan-1-3"}},
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()
    response = put_plan(platform, platform.runner_token(pod["metadata"]["name"]), "other-plan-1", 3, "other")
    assert response.status_code == 201


def test_a_reviewed_token_keeps_the_whole_identity_for_the_servers_access_reviews(platform: AuthPlatform):
    """The TokenReview's uid and extra stay on the principal (kube/subject.py: the server's SubjectAccessReviews
    ask about the whole identity): a pod-bound token carries its pod in `extra`."""
    from burrito_py.datastore.kube_auth import POD_NAME_EXTRA, KubeAuthenticator
    from tests.integration.datastore.auth_platform import AUDIENCE

    who = asyncio.run(KubeAuthenticator([AUDIENCE], kubeconfig=platform.kubeconfig)
                      .authenticate(platform.tokens["default-sa-pod"]))
    assert who.username == "system:serviceaccount:default:default" and who.uid
    assert dict(who.extra)[POD_NAME_EXTRA] == ("app-plan-1-7",)  # the forged pod of auth_platform._tokens
