"""Service-account identities on the emulator, for `burrito-py dev`, the e2e platform and tests.

The emulator's kubeconfig carries a static token (the bootstrap cluster admin, in `system:masters`) that a
TokenReview rejects (as a real cluster rejects a static token in a TokenReview of another audience), so the
datastore could not tell who `kubectl`, the controllers and `burrito-py plan download` are.
`login_as_local_admin` makes the kubeconfig user a service account instead, with a token for both the API's
audience and the datastore's (`burrito-py`); the datastore is then told that this username is an admin, as
the Helm chart tells it about the controllers' and server's service accounts. The emulator enforces RBAC,
so that service account is bound to `cluster-admin` first (as the static admin): it stands for the person
at the keyboard, who is the cluster admin of a local emulator.

`grant_runner_access` gives a tenant namespace the runner service account and exactly the permissions the
runner program uses.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import httpx
import yaml

from burrito_local.kube_authn import ADMIN_TOKEN
from burrito_local.kube_tokens import API_AUDIENCES

LOCAL_ADMIN_NAMESPACE = "kube-system"
LOCAL_ADMIN_ACCOUNT = "burrito-py-local-admin"
DATASTORE_AUDIENCE = "burrito-py"
RUNNER_ACCOUNT = "burrito-py-runner"
PULL_REQUEST_RUNNER_ACCOUNT = "burrito-py-runner-pr"  # ControllerSettings.runner_pull_request_service_account
RBAC = "rbac.authorization.k8s.io"
APPLY = {"Content-Type": "application/apply-patch+yaml"}
# What burrito_py/runner/main.py calls: it reads its TerraformRun, TerraformLayer and TerraformRepository, and
# nothing else (no write, no Secret: issue 24). Plans, logs, sources, outputs and its variables go through the
# datastore, not the API.
RUNNER_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["terraform.burrito-py.io"],
     "resources": ["terraformruns", "terraformlayers", "terraformrepositories"], "verbs": ["get"]},
]


def service_account_username(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


LOCAL_ADMIN_USERNAME = service_account_username(LOCAL_ADMIN_NAMESPACE, LOCAL_ADMIN_ACCOUNT)


def ensure_namespace(http: httpx.Client, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    response = http.post("/api/v1/namespaces", json=body)
    if response.status_code not in (201, 409):
        response.raise_for_status()


def ensure_service_account(http: httpx.Client, namespace: str, name: str) -> None:
    ensure_namespace(http, namespace)
    body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
    response = http.post(f"/api/v1/namespaces/{namespace}/serviceaccounts", json=body)
    if response.status_code not in (201, 409):
        response.raise_for_status()


def request_token(
    http: httpx.Client,
    namespace: str,
    account: str,
    audiences: list[str],
    seconds: int = 3600,
    pod: str | None = None,
) -> str:
    """A TokenRequest, optionally bound to a pod (as the kubelet does for projected volumes)."""
    spec: dict[str, Any] = {"audiences": audiences, "expirationSeconds": seconds}
    if pod is not None:
        spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": pod}
    response = http.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    response.raise_for_status()
    return str(response.json()["status"]["token"])


def set_kubeconfig_token(kubeconfig: Path, token: str) -> None:
    """Replace the current context's user token (atomically: other processes read this file)."""
    config = yaml.safe_load(kubeconfig.read_text()) or {}
    current = config.get("current-context")
    context = next(c["context"] for c in config.get("contexts", []) if c["name"] == current)
    user = next(u for u in config.get("users", []) if u["name"] == context["user"])
    user["user"] = {"token": token}
    tmp = kubeconfig.with_name(kubeconfig.name + ".tmp")
    tmp.write_text(yaml.safe_dump(config))
    tmp.replace(kubeconfig)


def admin_client(api_url: str) -> httpx.Client:
    """An HTTP client to the emulator as its bootstrap cluster admin (the static kubeconfig token)."""
    return httpx.Client(base_url=api_url, timeout=30.0, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})


def _apply(http: httpx.Client, path: str, obj: dict[str, Any]) -> None:
    """Server-side apply (create or bring up to date), as `kubectl apply --server-side --force-conflicts`."""
    response = http.patch(f"{path}/{obj['metadata']['name']}", json=obj, headers=APPLY,
                          params={"fieldManager": "burrito-py-local", "force": "true"})
    response.raise_for_status()


def grant_runner_access(http: httpx.Client, namespace: str) -> str:
    """The runner's ServiceAccount `burrito-py-runner` in `namespace`, a Role of the same name with
    RUNNER_RULES and the RoleBinding between them; returns the account's username.

    The Helm chart's runner Role grants exactly the same (tests/unit/chart/test_chart_rbac.py holds the two
    equal). A layer whose repository lives in another namespace needs `get terraformrepositories` there
    too, which this function does not grant.
    """
    base = f"/apis/{RBAC}/v1/namespaces/{namespace}"
    # The pull requests' runner account (issue 24, P2) gets the same reads, as the chart's `-runner-pr` Role.
    for account in (RUNNER_ACCOUNT, PULL_REQUEST_RUNNER_ACCOUNT):
        ensure_service_account(http, namespace, account)
        meta = {"name": account, "namespace": namespace}
        _apply(http, f"{base}/roles", {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": meta,
                                       "rules": RUNNER_RULES})
        _apply(http, f"{base}/rolebindings", {
            "apiVersion": f"{RBAC}/v1", "kind": "RoleBinding", "metadata": meta,
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})
    return service_account_username(namespace, RUNNER_ACCOUNT)


def local_admin_token(http: httpx.Client, seconds: int = 7 * 24 * 3600) -> str:
    """The local admin service account, bound to `cluster-admin`, and a token of it for the API's and the
    datastore's audiences (`http`: a cluster admin's client, of the emulator or of a real API server)."""
    ensure_service_account(http, LOCAL_ADMIN_NAMESPACE, LOCAL_ADMIN_ACCOUNT)
    _apply(http, f"/apis/{RBAC}/v1/clusterrolebindings", {
        "apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": LOCAL_ADMIN_ACCOUNT},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": LOCAL_ADMIN_ACCOUNT, "namespace": LOCAL_ADMIN_NAMESPACE}]})
    return request_token(http, LOCAL_ADMIN_NAMESPACE, LOCAL_ADMIN_ACCOUNT, [*API_AUDIENCES, DATASTORE_AUDIENCE],
                         seconds)


def login_as_local_admin(api_url: str, kubeconfig: Path, seconds: int = 7 * 24 * 3600) -> str:
    """Make the kubeconfig user the local admin service account, bound to `cluster-admin`; return its
    username."""
    with admin_client(api_url) as http:
        token = local_admin_token(http, seconds)
    set_kubeconfig_token(kubeconfig, token)
    return LOCAL_ADMIN_USERNAME


def write_token_kubeconfig(path: Path, server: str, ca_pem: bytes, token: str, namespace: str = "default") -> Path:
    """A kubeconfig for `server` as the bearer of `token` (mode 0600, written atomically)."""
    name = "burrito-py-local"
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": server,
                                                "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(yaml.safe_dump(config))
    tmp.replace(path)
    return path


def publish_local_service(http: httpx.Client, namespace: str, name: str, url: str, labels: dict[str, str]) -> None:
    """A selector-less Service with hand-written Endpoints for a component running in this process (dev's
    in-process mode), so that clients reach it as on a cluster: through the API server's service proxy."""
    parsed = httpx.URL(url)
    ensure_namespace(http, namespace)
    port = {"name": "http", "port": 8080, "targetPort": parsed.port, "protocol": "TCP"}
    _apply(http, f"/api/v1/namespaces/{namespace}/services", {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"ports": [port]},
    })
    _apply(http, f"/api/v1/namespaces/{namespace}/endpoints", {
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "subsets": [{"addresses": [{"ip": parsed.host}],
                     "ports": [{"name": "http", "port": parsed.port, "protocol": "TCP"}]}],
    })
