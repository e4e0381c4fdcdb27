"""The API server and credentials a kubeconfig names (what `burrito-py dev` and the tests write): for kopf's
login and for the datastore client's token outside a pod. kopf is imported only by the login that needs it, so
the runner, which reads no kubeconfig, never loads it."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    import kopf


@dataclass(frozen=True, slots=True)
class KubeconfigUser:
    server: str
    token: str | None
    insecure: bool
    ca_path: str | None
    ca_data: bytes | None
    namespace: str | None


def read_kubeconfig(kubeconfig: Path) -> KubeconfigUser:
    """The current context's server, CA and user token."""
    config = yaml.safe_load(kubeconfig.read_text()) or {}
    current = config.get("current-context")
    context = next(c["context"] for c in config.get("contexts", []) if c["name"] == current)
    cluster = next(c["cluster"] for c in config.get("clusters", []) if c["name"] == context["cluster"])
    user: dict[str, Any] = (
        next((u["user"] for u in config.get("users", []) if u["name"] == context.get("user")), {}) or {}
    )
    return KubeconfigUser(
        server=cluster["server"],
        token=user.get("token"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        ca_path=cluster.get("certificate-authority"),
        ca_data=base64.b64decode(cluster["certificate-authority-data"]) if cluster.get("certificate-authority-data")
        else None,
        namespace=context.get("namespace"),
    )


def kubeconfig_login(kubeconfig: Path) -> kopf.ConnectionInfo:
    """kopf's login from a kubeconfig."""
    import kopf

    user = read_kubeconfig(kubeconfig)
    return kopf.ConnectionInfo(server=user.server, token=user.token, insecure=user.insecure, ca_path=user.ca_path,
                               ca_data=user.ca_data, default_namespace=user.namespace)
