"""Service-account identities on the emulator, for `burrito-py dev`, the e2e platform and tests.

The emulator's kubeconfig carries a static token that a TokenReview rejects (as a real cluster would reject
an unknown token), so the datastore could not tell who `kubectl`, the controllers and `burrito-py plan
download` are. `login_as_local_admin` makes the kubeconfig user a service account instead, with a token for
both the API's audience and the datastore's (`burrito-py`); the datastore is then told that this username
is an admin, as the Helm chart tells it about the controllers' and server's service accounts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import yaml

from burrito_py.local.kube_tokens import API_AUDIENCES

LOCAL_ADMIN_NAMESPACE = "kube-system"
LOCAL_ADMIN_ACCOUNT = "burrito-py-local-admin"
DATASTORE_AUDIENCE = "burrito-py"


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


def login_as_local_admin(api_url: str, kubeconfig: Path, seconds: int = 7 * 24 * 3600) -> str:
    """Make the kubeconfig user the local admin service account; return its username."""
    with httpx.Client(base_url=api_url, timeout=30.0) as http:
        ensure_service_account(http, LOCAL_ADMIN_NAMESPACE, LOCAL_ADMIN_ACCOUNT)
        token = request_token(
            http, LOCAL_ADMIN_NAMESPACE, LOCAL_ADMIN_ACCOUNT, [*API_AUDIENCES, DATASTORE_AUDIENCE], seconds
        )
    set_kubeconfig_token(kubeconfig, token)
    return LOCAL_ADMIN_USERNAME
