"""Attack: a tenant who may edit layers and repositories, but may not read the namespace's Secrets, hands one to
runner code of their choosing (docs/architecture.md §6.3, §9, §24).

`varsFrom` (the controllers read the Secret and give its values to the run) and `overrideRunnerSpec`'s env
`secretKeyRef`, `envFrom`, secret volumes (the kubelet mounts it into the pod the controllers create) and a csi
volume's `nodePublishSecretRef` (the kubelet hands it to the driver, which fetches with it) named any
Secret of the namespace: the git credentials whose `allowedHosts` says where they may go, a notifier's webhook URL,
another application's password. The tenant's code (a repository of their own) then sends the values anywhere.
Only a Secret annotated `api.burrito-py.io/runner-secret: "true"` (by whoever may write it) reaches a runner now.
The controllers' own reads and the run controller's own reconcile, against the emulator.
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api.run import pod_name
from burrito_py.api.runner_secrets import RUNNER_SECRET, RUNNER_SERVICE_ACCOUNT
from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.run_inputs import read_sources
from burrito_py.kube.client import Kube
from tests.support.runner_overrides import RUN, objects, reconcile_once, runner_account, settings

TOKEN = "ghp-the-teams-git-token"


def put_secret(admin: Any, name: str, open_to_runners: bool) -> None:
    """The team's git credentials (allowed to github.com only), or a Secret meant for Terraform."""
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if open_to_runners:
        meta["annotations"] = {RUNNER_SECRET: "true"}
    admin.post("/api/v1/namespaces/default/secrets", json={
        "apiVersion": "v1", "kind": "Secret", "metadata": meta,
        "data": {"token": base64.b64encode(TOKEN.encode()).decode(),
                 "allowedHosts": base64.b64encode(b"github.com").decode()}}).raise_for_status()


def sources_of(kubeconfig: Path, name: str) -> Any:
    layer = {"metadata": {"name": "app", "namespace": "default"},
             "spec": {"varsFrom": [{"kind": "Secret", "name": name}]}}

    async def read() -> Any:
        kube = await Kube.connect(str(kubeconfig))
        try:
            return await read_sources(Context(settings=settings(), kube=kube), layer)
        finally:
            await kube.close()

    return asyncio.run(read())


def test_attack_vars_from_cannot_hand_a_secret_not_opened_to_runners_to_the_runner(
    api: tuple[ApiServer, Path],
) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        put_secret(admin, "git-credentials", open_to_runners=False)
        put_secret(admin, "terraform-vars", open_to_runners=True)

    refused = sources_of(kubeconfig, "git-credentials")
    assert TOKEN not in str(refused.values), "the git credentials reached the runner"
    assert refused.error is not None and refused.error.startswith(
        "Secret default/git-credentials (spec.varsFrom[0]) is not open to runners: only a Secret annotated "
        f'{RUNNER_SECRET}: "true"'), refused.error
    assert TOKEN not in refused.error

    allowed = sources_of(kubeconfig, "terraform-vars")
    assert allowed.error is None and allowed.values[0]["token"] == TOKEN


OVERRIDES = {
    "env": {"env": [{"name": "CLOUD_TOKEN", "valueFrom": {"secretKeyRef": {"name": "git-credentials",
                                                                          "key": "token"}}}]},
    "envFrom": {"envFrom": [{"secretRef": {"name": "git-credentials"}}]},
    "volumes": {"volumes": [{"name": "creds", "secret": {"secretName": "git-credentials"}}],
                "volumeMounts": [{"name": "creds", "mountPath": "/creds"}]},
    "projected": {"volumes": [{"name": "creds", "projected": {"sources": [{"secret": {"name": "git-credentials"}}]}}],
                  "volumeMounts": [{"name": "creds", "mountPath": "/creds"}]},
    # The kubelet hands the Secret to the CSI driver (a secrets store logs in to its vault with it) and mounts what
    # the driver fetches.
    "csi": {"volumes": [{"name": "creds", "csi": {"driver": "secrets-store.csi.k8s.io",
                                                  "volumeAttributes": {"secretProviderClass": "payments"},
                                                  "nodePublishSecretRef": {"name": "git-credentials"}}}],
            "volumeMounts": [{"name": "creds", "mountPath": "/creds"}]},
}


def start(admin: Any, kubeconfig: Path, override: dict[str, Any], open_to_runners: bool) -> dict[str, Any]:
    """The runner account and the Secret, the repository, layer and run; one reconcile of the run. Its status."""
    admin.post("/api/v1/namespaces/default/serviceaccounts", json=runner_account("default")).raise_for_status()
    put_secret(admin, "git-credentials", open_to_runners)
    base = "/apis/terraform.burrito-py.io/v1alpha1/namespaces/default"
    stored = [admin.post(f"{base}/{plural}", json=body).raise_for_status().json()
              for body, plural in zip(objects("default", layer_override=override, repository_override={}),
                                      ("terraformrepositories", "terraformlayers", "terraformruns"), strict=True)]
    asyncio.run(reconcile_once(str(kubeconfig), *stored))
    return dict(admin.get(f"{base}/terraformruns/{RUN}").json().get("status") or {})


@pytest.mark.parametrize("what", list(OVERRIDES))
def test_attack_a_runner_pod_gets_no_secret_not_opened_to_runners(api: tuple[ApiServer, Path], what: str) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        status = start(admin, kubeconfig, OVERRIDES[what], open_to_runners=False)

        assert admin.get(f"/api/v1/namespaces/default/pods/{pod_name(RUN, 1)}").status_code == 404
        created = next(c for c in status["conditions"] if c["type"] == "RunnerPodCreated")
        assert created["status"] == "False" and created["reason"] == "PodCreationFailed", created
        field = "volumes" if what in ("projected", "csi") else what
        assert (f"Secret default/git-credentials (TerraformLayer default/app spec.overrideRunnerSpec.{field}[0]) is "
                "not open to runners") in created["message"], created
        assert TOKEN not in str(status)
        events = admin.get("/api/v1/namespaces/default/events").json()["items"]
        assert any(e["reason"] == "RunnerSecretRefused" and e["type"] == "Warning" for e in events), events


def test_a_secret_opened_to_runners_reaches_the_pod(api: tuple[ApiServer, Path]) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        status = start(admin, kubeconfig, OVERRIDES["env"], open_to_runners=True)

        assert status["state"] == "Running", status
        pod = admin.get(f"/api/v1/namespaces/default/pods/{pod_name(RUN, 1)}").raise_for_status().json()
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["CLOUD_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "git-credentials"


def put_account(admin: Any, name: str, open_to_runners: bool) -> None:
    """An account bound to a cloud role (its annotation, as IRSA reads it), meant for a deploy job or for runners."""
    annotations = {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/production-admin"}
    if open_to_runners:
        annotations[RUNNER_SERVICE_ACCOUNT] = "true"
    admin.post("/api/v1/namespaces/default/serviceaccounts", json={
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations}}).raise_for_status()


def test_attack_a_runner_pod_cannot_run_as_an_account_not_opened_to_runners(api: tuple[ApiServer, Path]) -> None:
    """A layer editor (who may not create pods, nor act as the namespace's accounts) names the account of the
    namespace that holds the production cloud role: the pod would run their code with its token and role."""
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        put_account(admin, "deployer", open_to_runners=False)
        status = start(admin, kubeconfig, {"serviceAccountName": "deployer"}, open_to_runners=False)

        assert admin.get(f"/api/v1/namespaces/default/pods/{pod_name(RUN, 1)}").status_code == 404
        created = next(c for c in status["conditions"] if c["type"] == "RunnerPodCreated")
        assert created["status"] == "False", created
        assert ("ServiceAccount default/deployer (TerraformLayer default/app spec.overrideRunnerSpec."
                "serviceAccountName) is not open to runners") in created["message"], created
        events = admin.get("/api/v1/namespaces/default/events").json()["items"]
        assert any(e["reason"] == "RunnerServiceAccountRefused" and e["type"] == "Warning" for e in events), events


def test_a_missing_account_is_refused_naming_it(api: tuple[ApiServer, Path]) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        status = start(admin, kubeconfig, {"serviceAccountName": "not-there"}, open_to_runners=False)
        created = next(c for c in status["conditions"] if c["type"] == "RunnerPodCreated")
        assert "ServiceAccount default/not-there (TerraformLayer default/app spec.overrideRunnerSpec." \
               "serviceAccountName) does not exist" in created["message"], created


def test_an_account_opened_to_runners_runs_the_pod(api: tuple[ApiServer, Path]) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        put_account(admin, "terraform", open_to_runners=True)
        status = start(admin, kubeconfig, {"serviceAccountName": "terraform"}, open_to_runners=False)

        assert status["state"] == "Running", status
        pod = admin.get(f"/api/v1/namespaces/default/pods/{pod_name(RUN, 1)}").raise_for_status().json()
        assert pod["spec"]["serviceAccountName"] == "terraform"
