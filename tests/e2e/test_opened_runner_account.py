"""A layer run as a ServiceAccount its writers opened to runners (docs/architecture.md §6.3, §10.2), end to end on
the real control plane: the platform's way to give one layer its own cloud identity.

The run controller makes the pod as the account `overrideRunnerSpec.serviceAccountName` names once it carries
`api.burrito-py.io/runner-service-account: "true"`; the runner reads its run, layer and repository with the pod's
token (the account is bound to the runner's Role), and the datastore takes that token as the run's runner. The
datastore used to refuse every account but the two platform ones, so such a layer failed each plan upload with 403
and never applied."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from burrito_py.api.runner_secrets import RUNNER_SERVICE_ACCOUNT
from tests.e2e.conftest import Platform
from tests.support.git_repos import TestRepo
from tests.support.real_cluster import RELEASE

ACCOUNT = "deployer"


def open_account(platform: Platform) -> None:
    """The account, opened to runners by whoever may write it, and bound to the runner's Role."""
    platform.core.create_namespaced_service_account(platform.namespace, {
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": ACCOUNT, "annotations": {RUNNER_SERVICE_ACCOUNT: "true"}}})
    rbac = client.RbacAuthorizationV1Api(platform.core.api_client)
    rbac.create_namespaced_role_binding(platform.namespace, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": f"{ACCOUNT}-runner"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{RELEASE}-runner"},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": platform.namespace}]})


def test_a_layer_run_as_an_opened_account_plans_and_applies(platform: Platform, repo: TestRepo) -> None:
    open_account(platform)
    platform.create_repository("repo", repo.url)
    override: dict[str, Any] = {"extraInitArgs": [f"-backend-config=path={platform.state_file('app')}"],
                                "serviceAccountName": ACCOUNT}
    platform.create_layer("app", "repo", "layers/app", auto_apply=True, overrideRunnerSpec=override)
    layer = platform.wait_state("app", "Idle", timeout=120)
    assert layer["status"]["lastResult"].startswith("Applied: Plan: 1 to add"), layer["status"]
    pods = platform.pods("app")
    assert pods and {pod.spec.service_account_name for pod in pods} == {ACCOUNT}
    assert [r["status"]["state"] for r in platform.runs("app")] == ["Succeeded", "Succeeded"]
