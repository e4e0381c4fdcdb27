"""An emulator with two layers, their runs and runner pods, a datastore with auth on, and one token per kind
of caller (for the test_auth*.py files)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier
from burrito_local.identity import ensure_service_account, grant_runner_access, request_token, service_account_username
from burrito_local.kube_tokens import TokenIssuer

from burrito_py.api import annotations as ann
from burrito_py.api.crdgen import generate_crds
from burrito_py.datastore.client import DatastoreClient
from burrito_py.datastore.in_process import running_datastore
from tests.support.emulator import running_apiserver

NS = "default"
RUNNER_SA = "burrito-py-runner"
CONTROLLERS = ("burrito-py", "burrito-py-controllers")
AUDIENCE = "burrito-py"
# Layer → (its repository, its runs; the first run owns the runner pod that gets a token).
LAYERS = {"app": ("repo-a", ["app-plan-1", "app-plan-0"]), "other": ("repo-b", ["other-plan-1"])}
TREE = "t1"
REVISION = "rev1"
ARCHIVE = b"fake source archive"


@dataclass
class AuthPlatform:
    api: ApiServer
    url: str
    data_dir: Path
    http: httpx.Client  # to the emulator
    kubeconfig: Path  # the admin's, for another datastore reviewing the same tokens
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def admin_token(self) -> str:
        return self.tokens["controller"]

    def runner_token(self, pod: str, account: str = RUNNER_SA, audiences: list[str] | None = None) -> str:
        return request_token(self.http, NS, account, audiences or [AUDIENCE], 3600, pod=pod)

    def create_runner_pod(self, run: str, attempt: int, account: str = RUNNER_SA) -> dict[str, Any]:
        owner = self.http.get(f"/apis/{ann.API_VERSION}/namespaces/{NS}/terraformruns/{run}").json()
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": f"{run}-{attempt}", "namespace": NS,
                "labels": {ann.LABEL_COMPONENT: ann.COMPONENT_RUNNER, ann.LABEL_RUN: run},
                "ownerReferences": [{"apiVersion": ann.API_VERSION, "kind": "TerraformRun", "name": run,
                                     "uid": owner["metadata"]["uid"], "controller": True}],
            },
            "spec": {"serviceAccountName": account, "restartPolicy": "Never",
                     "containers": [{"name": "runner", "image": "local"}]},
        }
        response = self.http.post(f"/api/v1/namespaces/{NS}/pods", json=pod)
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def record_attempts(self, run: str, *pods: dict[str, Any]) -> None:
        """Write the run's status as the run controller does after creating each attempt's pod."""
        attempts = [{"podName": p["metadata"]["name"], "podUid": p["metadata"]["uid"], "number": i}
                    for i, p in enumerate(pods, start=1)]
        self.http.patch(f"/apis/{ann.API_VERSION}/namespaces/{NS}/terraformruns/{run}/status",
                        json={"status": {"state": "Running", "attempts": attempts,
                                         "runnerPod": attempts[-1]["podName"]}},
                        headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()

    def runner_of(self, run: str, action: str, layer: str = "app", state: str = "Running",
                  spec: dict[str, Any] | None = None) -> str:
        """A new run of `layer` doing `action`, its first attempt's pod recorded (then its status `state`), and that
        pod's token."""
        self.http.post(f"/apis/{ann.API_VERSION}/namespaces/{NS}/terraformruns", json={
            "apiVersion": ann.API_VERSION, "kind": "TerraformRun",
            "metadata": {"name": run, "namespace": NS, "labels": {ann.LABEL_LAYER: layer}},
            "spec": {"action": action, "layer": {"name": layer}, **(spec or {})}}).raise_for_status()
        pod = self.create_runner_pod(run, 1)
        self.record_attempts(run, pod)
        if state != "Running":
            self.http.patch(f"/apis/{ann.API_VERSION}/namespaces/{NS}/terraformruns/{run}/status",
                            json={"status": {"state": state}},
                            headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()
        return self.runner_token(pod["metadata"]["name"])


def _objects(applier: Applier) -> None:
    for crd in generate_crds().values():
        applier.apply(crd)
    for layer, (repository, runs) in LAYERS.items():
        applier.apply({"apiVersion": ann.API_VERSION, "kind": "TerraformLayer",
                       "metadata": {"name": layer, "namespace": NS},
                       "spec": {"repository": {"name": repository}, "branch": "main", "path": layer}})
        for run in runs:
            applier.apply({"apiVersion": ann.API_VERSION, "kind": "TerraformRun",
                           "metadata": {"name": run, "namespace": NS, "labels": {ann.LABEL_LAYER: layer}},
                           "spec": {"action": "plan", "layer": {"name": layer}}})


def _tokens(platform: AuthPlatform) -> None:
    http, api = platform.http, platform.api
    grant_runner_access(http, NS)
    for namespace, account in ((NS, "someone"), (NS, "default"), CONTROLLERS):
        ensure_service_account(http, namespace, account)
    for layer in LAYERS:
        run = LAYERS[layer][1][0]
        platform.record_attempts(run, platform.create_runner_pod(run, 1))
    # Run app-plan-0 is on its second attempt: the first attempt's pod (still there) is no longer its runner.
    first = platform.create_runner_pod("app-plan-0", 1)
    platform.record_attempts("app-plan-0", first, platform.create_runner_pod("app-plan-0", 2))
    # A pod that names run app-plan-1 as its controller but runs as `default` (issue 11, item 14).
    forged = platform.create_runner_pod("app-plan-1", 7, account="default")
    own_pod = "app-plan-1-1"
    runner_uid = http.get(f"/api/v1/namespaces/{NS}/serviceaccounts/{RUNNER_SA}").json()["metadata"]["uid"]
    pod_uid = http.get(f"/api/v1/namespaces/{NS}/pods/{own_pod}").json()["metadata"]["uid"]
    doomed = platform.create_runner_pod("app-plan-1", 9)
    platform.tokens.update({
        "controller": request_token(http, CONTROLLERS[0], CONTROLLERS[1], [AUDIENCE]),
        "own-runner": platform.runner_token(own_pod),
        "other-runner": platform.runner_token("other-plan-1-1"),
        "stranger": request_token(http, NS, "someone", [AUDIENCE]),
        # A token of another service account bound to the runner's pod: the pod does not run as it.
        "impostor": platform.runner_token(own_pod, account="someone"),
        "wrong-audience": platform.runner_token(own_pod, audiences=["https://kubernetes.default.svc.cluster.local"]),
        # Signed by the emulator, but already expired (what a token issued long ago looks like).
        "expired": api.tokens.issue(NS, RUNNER_SA, runner_uid, [AUDIENCE], -60, pod=(own_pod, pod_uid))[0],
        # The right claims signed by another key.
        "forged": TokenIssuer(lambda *_: None).issue(NS, RUNNER_SA, runner_uid, [AUDIENCE], 3600,
                                                     pod=(own_pod, pod_uid))[0],
        "garbage": "not-a-token",
        "deleted-pod": platform.runner_token(doomed["metadata"]["name"]),
        "default-sa-pod": platform.runner_token(forged["metadata"]["name"], account="default"),
        "previous-attempt": platform.runner_token(first["metadata"]["name"]),
    })
    http.delete(f"/api/v1/namespaces/{NS}/pods/{doomed['metadata']['name']}").raise_for_status()


def _seed(platform: AuthPlatform) -> None:
    """One plan, log and outputs per run and one source per repository, written as the controllers would."""
    with DatastoreClient(platform.url, token=platform.admin_token) as store:
        for layer, (repository, runs) in LAYERS.items():
            for run in runs:
                store.put_plan(NS, layer, run, 1, "json", b'{"seeded": true}')
                store.put_logs(NS, layer, run, 1, b"seeded log\n")
                store.put_outputs(NS, layer, run, 1, b'{"seeded": {"value": 1}}')
                store.put_applied(NS, layer, run, 1, "sha256:00")
                store.put_review(NS, layer, run, 1, b'{"planSum": "sha256:00"}')
                store.put_inputs(NS, layer, run, b'{"digest": "sha256:00", "variables": {}}')
            store.put_source(NS, repository, REVISION, TREE, ARCHIVE)


@contextlib.contextmanager
def running_auth_platform(workdir: Path, **settings: Any) -> Iterator[AuthPlatform]:
    """`settings`: further DatastoreSettings of its datastore."""
    kubeconfig = workdir / "kubeconfig"
    with contextlib.ExitStack() as stack:
        api = stack.enter_context(running_apiserver(workdir, kubeconfig=kubeconfig))
        applier = Applier(api.url)
        stack.callback(applier.close)
        _objects(applier)
        http = stack.enter_context(httpx.Client(base_url=api.url, timeout=30.0, headers=api.admin_headers))
        url = stack.enter_context(running_datastore(
            workdir / "data", auth_enabled=True, kubeconfig=kubeconfig,
            admin_users=[service_account_username(*CONTROLLERS)], **settings,
        ))
        platform = AuthPlatform(api, url, workdir / "data", http, kubeconfig)
        _tokens(platform)
        _seed(platform)
        yield platform


def token_reviews(api: ApiServer) -> int:
    return sum(1 for r in list(api.requests) if r.path.endswith("/tokenreviews") and r.method == "POST")
