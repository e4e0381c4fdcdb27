"""The emulator with a repository, two layers in two namespaces and their runs (status written through the
/status subresource), a datastore with auth on holding their plans and logs, and the server with auth on
(its TokenReviews and SubjectAccessReviews going to the emulator, RBAC enforced); one token per kind of caller
(for test_rest_*.py):

- `person`: an operator who may read burrito-py's kinds and patch layers in every namespace (a ClusterRole), but
  not read Secrets;
- `tenant-a`: a tenant user of team-a (a Role there: read and patch layers, read runs, repositories and pull
  requests), nothing in team-b;
- `auditor`: reads team-a's kinds and its Secrets (so the raw plan JSON);
- `nobody`: authenticated, no grant;
- `runner`: team-a's runner ServiceAccount (its Role lets it get team-a's runs);
- `controller`, `server`: the components' accounts (datastore admins)."""

from __future__ import annotations

import contextlib
import json
import time
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
from burrito_py.server.serving import running_server
from burrito_py.server.settings import ServerSettings
from tests.support.emulator import running_apiserver

AUDIENCE = "burrito-py"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
READ_KINDS = {"apiGroups": [ann.GROUP], "verbs": ["get", "list", "watch"],
              "resources": ["terraformlayers", "terraformruns", "terraformrepositories", "terraformpullrequests"]}
PATCH_LAYERS = {"apiGroups": [ann.GROUP], "resources": ["terraformlayers"], "verbs": ["patch"]}
READ_SECRETS = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
SYSTEM = "burrito-py-system"
CONTROLLERS = (SYSTEM, "burrito-py-controllers")
SERVER = (SYSTEM, "burrito-py-server")
RUNNER_SA = "burrito-py-runner"
NS_A, NS_B = "team-a", "team-b"
STATE_SECRET = "pg-password-in-the-state"  # in every version of team-a/app's state: never in an answer but a download
REPO_URL = "https://deploy:hunter2@github.com/org/infra.git"  # the password must never be echoed
REPO_URL_REDACTED_HOST = "github.com/org/infra.git"

# team-a/app: an old succeeded plan (two attempts) and a newer running apply; team-b/network (whose repository
# is team-a's): one failed plan, and a run labelled for it whose spec names another layer.
OLD_PLAN, NEW_APPLY, NETWORK_PLAN, STRAY = "zz-app-plan-old", "aa-app-apply-new", "network-plan-1", "network-stray"
PLAN_BIN = bytes(range(256)) * 4
PLAN_JSON = b'{"format_version": "1.2", "resource_changes": [{"address": "null_resource.a"}]}'
PLAN_PRETTY = b"Terraform will perform the following actions:\n  # null_resource.a will be created\n\xc3\xa9\n"
PLAN_SHORT = b"Plan: 1 to add, 0 to change, 0 to destroy"
FIRST_ATTEMPT_SHORT = b"Plan: 9 to add, 9 to change, 9 to destroy"
LOG_1 = b"attempt 1: terraform init\nError: provider download failed\n"
LOG_2 = b"attempt 2: terraform plan\n\x1b[32mPlan: 1 to add\x1b[0m\n"
NETWORK_LOG = b"network: terraform plan failed\n"


@dataclass
class RestPlatform:
    api: ApiServer
    server_url: str
    datastore_url: str
    kube: httpx.Client  # to the emulator
    tokens: dict[str, str] = field(default_factory=dict)
    settings: ServerSettings | None = None  # the server's

    def layer(self, namespace: str, name: str) -> dict[str, Any]:
        found = self.api.get_object(ann.API_VERSION, "terraformlayers", namespace, name)
        assert found is not None
        return found

    def layers_marked_for_sync(self) -> list[str]:
        return [f"{layer['metadata']['namespace']}/{layer['metadata']['name']}"
                for layer in self.api.list_objects(ann.API_VERSION, "terraformlayers")
                if ann.SYNC_NOW in (layer["metadata"].get("annotations") or {})]

    def client(self, identity: str | None = "person") -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[identity]}"} if identity else {}
        return httpx.Client(base_url=self.server_url, headers=headers, timeout=30)


def create(kube: httpx.Client, plural: str, namespace: str, body: dict[str, Any]) -> None:
    body = {"apiVersion": ann.API_VERSION, **body}
    body["metadata"]["namespace"] = namespace
    kube.post(f"/apis/{ann.API_VERSION}/namespaces/{namespace}/{plural}", json=body).raise_for_status()


def _status(kube: httpx.Client, plural: str, namespace: str, name: str, status: dict[str, Any]) -> None:
    kube.patch(
        f"/apis/{ann.API_VERSION}/namespaces/{namespace}/{plural}/{name}/status",
        json={"status": status},
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()


def _condition(kind: str, status: str, reason: str, message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-02T03:04:05Z"}


def run_body(name: str, layer: str, action: str, revision: str, labelled_for: str | None = None,
         artifact: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"action": action, "layer": {"name": layer, "revision": revision}}
    if artifact:
        spec["artifact"] = artifact
    return {"kind": "TerraformRun",
            "metadata": {"name": name, "labels": {ann.LABEL_LAYER: labelled_for or layer}}, "spec": spec}


def _next_second() -> None:
    """Runs get second-precision creation times: make the next one strictly newer."""
    time.sleep(1.01 - (time.time() % 1))


def _objects(applier: Applier, kube: httpx.Client) -> None:
    for crd in generate_crds().values():
        applier.apply(crd)
    for namespace in (NS_A, NS_B):
        applier.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    create(kube, "terraformrepositories", NS_A, {"kind": "TerraformRepository", "metadata": {"name": "infra"},
                                                  "spec": {"repository": {"url": REPO_URL}}})
    _status(kube, "terraformrepositories", NS_A, "infra", {"state": "Synced"})
    create(kube, "terraformlayers", NS_A, {
        "kind": "TerraformLayer",
        "metadata": {"name": "app",
                     "annotations": {ann.PLAN_RUN: f"{OLD_PLAN}/2", ann.PLAN_SUMMARY: PLAN_SHORT.decode()}},
        "spec": {"repository": {"name": "infra"}, "branch": "main", "path": "app"},
    })
    create(kube, "terraformlayers", NS_B, {
        "kind": "TerraformLayer", "metadata": {"name": "network"},
        "spec": {"repository": {"name": "infra", "namespace": NS_A}, "branch": "prod", "path": "net"},
    })

    create(kube, "terraformruns", NS_A, run_body(OLD_PLAN, "app", "plan", "abc123"))
    create(kube, "terraformruns", NS_B, run_body(NETWORK_PLAN, "network", "plan", "def456"))
    create(kube, "terraformruns", NS_B, run_body(STRAY, "app", "plan", "def456", labelled_for="network"))
    _next_second()
    create(kube, "terraformruns", NS_A, run_body(NEW_APPLY, "app", "apply", "abc123",
                                              artifact={"run": OLD_PLAN, "attempt": 2}))

    _status(kube, "terraformruns", NS_A, OLD_PLAN, {
        "state": "Succeeded", "retries": 1, "runnerPod": f"{OLD_PLAN}-2", "lastRun": "2026-01-02T03:05:00Z",
        "conditions": [_condition("Succeeded", "True", "PlanSucceeded")],
        # Written out of order: the API lists attempts oldest first whatever the status holds.
        "attempts": [
            {"podName": f"{OLD_PLAN}-2", "number": 2, "startedAt": "2026-01-02T03:05:00Z",
             "finishedAt": "2026-01-02T03:06:00Z", "logsUploaded": True, "exitCode": 0},
            {"podName": f"{OLD_PLAN}-1", "number": 1, "startedAt": "2026-01-02T03:04:00Z",
             "finishedAt": "2026-01-02T03:04:30Z", "logsUploaded": True, "exitCode": 1},
        ],
    })
    _status(kube, "terraformruns", NS_A, NEW_APPLY, {
        "state": "Running", "attempts": [{"podName": f"{NEW_APPLY}-1", "number": 1}]})
    _status(kube, "terraformruns", NS_B, NETWORK_PLAN, {
        "state": "Failed", "retries": 3,
        "attempts": [{"podName": f"{NETWORK_PLAN}-1", "number": 1, "logsUploaded": True, "exitCode": 2}]})

    _status(kube, "terraformlayers", NS_A, "app", {
        "state": "ApplyNeeded", "lastResult": PLAN_SHORT.decode(),
        "lastRun": {"name": NEW_APPLY, "action": "apply", "date": "2026-01-02T03:07:00Z", "revision": "abc123"},
        "conditions": [_condition("IsPlanArtifactUpToDate", "True", "PlanIsRecent", "planned abc123"),
                       _condition("IsRunning", "True", "RunIsRunning")],
        "dependencies": [{"name": f"{NS_B}/network", "state": "MaxRetriesReached", "satisfied": False,
                          "reason": "UpstreamFailed", "message": f"{NS_B}/network cannot apply"}],
    })
    _status(kube, "terraformlayers", NS_B, "network", {
        "state": "MaxRetriesReached", "lastResult": "Plan failed",
        "lastRun": {"name": NETWORK_PLAN, "action": "plan", "date": "2026-01-02T03:00:00Z", "revision": "def456"},
        "conditions": [_condition("HasFailed", "True", "RetriesExhausted")],
    })


def grant(kube: httpx.Client, name: str, rules: list[dict[str, Any]], subject: dict[str, str],
          namespace: str | None = None) -> None:
    """A Role (or, without namespace, a ClusterRole) with `rules`, bound to `subject`."""
    scope = f"{RBAC}/namespaces/{namespace}" if namespace else RBAC
    kind = "Role" if namespace else "ClusterRole"
    kube.post(f"{scope}/{kind.lower()}s", json={"metadata": {"name": name}, "rules": rules}).raise_for_status()
    kube.post(f"{scope}/{kind.lower()}bindings", json={
        "metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [subject]}).raise_for_status()


def account(namespace: str, name: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


def _tokens(platform: RestPlatform) -> None:
    http, api = platform.kube, platform.api
    grant_runner_access(http, NS_A)
    for namespace, name in (CONTROLLERS, SERVER, (NS_A, "someone"), (NS_A, "tenant"), (NS_A, "auditor"),
                            (NS_A, "nobody")):
        ensure_service_account(http, namespace, name)
    grant(http, "burrito-py-operator", [READ_KINDS, PATCH_LAYERS], account(NS_A, "someone"))
    grant(http, "tenant", [READ_KINDS, PATCH_LAYERS], account(NS_A, "tenant"), NS_A)
    grant(http, "auditor", [READ_KINDS, READ_SECRETS], account(NS_A, "auditor"), NS_A)
    runner_uid = http.get(f"/api/v1/namespaces/{NS_A}/serviceaccounts/{RUNNER_SA}").json()["metadata"]["uid"]
    platform.tokens.update({
        "controller": request_token(http, *CONTROLLERS, [AUDIENCE]),
        "server": request_token(http, *SERVER, [AUDIENCE]),
        "person": request_token(http, NS_A, "someone", [AUDIENCE]),
        "tenant-a": request_token(http, NS_A, "tenant", [AUDIENCE]),
        "auditor": request_token(http, NS_A, "auditor", [AUDIENCE]),
        "nobody": request_token(http, NS_A, "nobody", [AUDIENCE]),
        "runner": request_token(http, NS_A, RUNNER_SA, [AUDIENCE]),
        "wrong-audience": request_token(http, NS_A, "someone", ["https://kubernetes.default.svc.cluster.local"]),
        # Signed by the emulator, but already expired (what a token issued long ago looks like).
        "expired": api.tokens.issue(NS_A, RUNNER_SA, runner_uid, [AUDIENCE], -60)[0],
        # The right claims signed by another key.
        "forged": TokenIssuer(lambda *_: None).issue(NS_A, RUNNER_SA, runner_uid, [AUDIENCE], 3600)[0],
        "garbage": "not-a-token",
    })


def _seed(platform: RestPlatform) -> None:
    """Plans and logs, written as the runners would (through the datastore's API, as an admin)."""
    with DatastoreClient(platform.datastore_url, token=platform.tokens["controller"]) as store:
        store.put_plan(NS_A, "app", OLD_PLAN, 1, "short", FIRST_ATTEMPT_SHORT)
        for fmt, data in (("bin", PLAN_BIN), ("json", PLAN_JSON), ("pretty", PLAN_PRETTY), ("short", PLAN_SHORT)):
            store.put_plan(NS_A, "app", OLD_PLAN, 2, fmt, data)  # type: ignore[arg-type]
        store.put_logs(NS_A, "app", OLD_PLAN, 1, LOG_1)
        store.put_logs(NS_A, "app", OLD_PLAN, 2, LOG_2)
        store.put_logs(NS_B, "network", NETWORK_PLAN, 1, NETWORK_LOG)


@contextlib.contextmanager
def running_rest_platform(workdir: Path) -> Iterator[RestPlatform]:
    kubeconfig = workdir / "kubeconfig"
    with contextlib.ExitStack() as stack:
        api = stack.enter_context(running_apiserver(workdir, kubeconfig=kubeconfig))
        kube = stack.enter_context(httpx.Client(base_url=api.url, timeout=30.0, headers=api.admin_headers))
        applier = Applier(api.url)
        stack.callback(applier.close)
        _objects(applier, kube)
        datastore = stack.enter_context(running_datastore(
            workdir / "data", auth_enabled=True, kubeconfig=kubeconfig,
            admin_users=[service_account_username(*CONTROLLERS), service_account_username(*SERVER)],
        ))
        platform = RestPlatform(api, "", datastore, kube)
        _tokens(platform)
        _seed(platform)
        token_file = workdir / "server-token"
        token_file.write_text(platform.tokens["server"])
        # Port 0: the listener's own pick (running_server), never a port another process takes first.
        settings = ServerSettings(host="127.0.0.1", port=0, kubeconfig=kubeconfig, auth_enabled=True,
                                  datastore_url=datastore, datastore_token_path=token_file)
        platform.settings = settings
        platform.server_url = stack.enter_context(running_server(settings))
        yield platform


def tfstate(serial: int, inputs: list[str]) -> bytes:
    """A state of team-a/app's lineage holding a `terraform_data` per input, a password and a sensitive output."""
    return json.dumps({
        "version": 4, "terraform_version": "1.11.4", "serial": serial, "lineage": "lineage-a",
        "outputs": {"dsn": {"value": f"postgres://app:{STATE_SECRET}@db", "type": "string", "sensitive": True}},
        "resources": [{"mode": "managed", "type": "terraform_data", "name": name, "provider": "x",
                       "instances": [{"attributes": {"input": f"{name}-{serial}", "password": STATE_SECRET}}]}
                      for name in inputs],
    }).encode()


def post_state_versions(platform: RestPlatform) -> None:
    """Three versions of team-a/app's state (a; a, b; b, c), posted to the datastore's state backend as the
    controllers' admin identity."""
    admin = {"Authorization": f"Bearer {platform.tokens['controller']}"}
    url = f"{platform.datastore_url}/api/v1/layers/{NS_A}/app/state"
    for serial, inputs in ((1, ["a"]), (2, ["a", "b"]), (3, ["b", "c"])):
        assert httpx.post(url, content=tfstate(serial, inputs), headers=admin).status_code == 200
