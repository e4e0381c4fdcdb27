"""The runner's few Kubernetes API calls: read its run, layer and repository; annotate the layer.

`kubernetes` is imported here only (~0.35 s), when the runner starts talking to the API. Configuration is
`kubernetes.config.load_config()`'s order — a kubeconfig from `$KUBECONFIG` (or `~/.kube/config`) first,
as the local kubelet provides one per pod, else the in-cluster service account — spelled out so that the
in-cluster case does not print load_config's "default location does not exist" notice into every run log.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from burrito_py.api import annotations as ann

__all__ = ["Kube", "KubeError"]

REQUEST_TIMEOUT = 30.0
MERGE_PATCH = "application/merge-patch+json"


class KubeError(Exception):
    """An API call failed; `status` is the HTTP status when the server answered (404: not found)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _kubeconfig_available() -> bool:
    paths = os.environ.get("KUBECONFIG", "")
    if any(p and Path(p).expanduser().exists() for p in paths.split(os.pathsep)):
        return True
    return Path("~/.kube/config").expanduser().exists()


class Kube:
    def __init__(self, api: Any) -> None:
        self._api = api  # kubernetes.client.CustomObjectsApi

    @classmethod
    def from_config(cls) -> Kube:
        from kubernetes import client, config

        configuration = client.Configuration()
        try:
            if _kubeconfig_available():
                config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            else:
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException as exc:
            raise KubeError(f"no Kubernetes API configuration (KUBECONFIG or in-cluster): {exc}") from None
        return cls(client.CustomObjectsApi(client.ApiClient(configuration)))

    def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        from kubernetes.client import ApiException

        try:
            result = getattr(self._api, method)(*args, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        except ApiException as exc:
            raise KubeError(f"{what}: HTTP {exc.status} {_reason(exc)}".rstrip(), exc.status) from None
        except Exception as exc:  # urllib3 connection and protocol errors of many types
            raise KubeError(f"{what}: the Kubernetes API is unreachable ({type(exc).__name__}: {exc})") from None
        return dict(result)

    def get(self, plural: str, namespace: str, name: str, kind: str) -> dict[str, Any]:
        return self._call(
            f"cannot read {kind} {namespace}/{name}",
            "get_namespaced_custom_object",
            ann.GROUP,
            ann.VERSION,
            namespace,
            plural,
            name,
        )

    def annotate(self, plural: str, namespace: str, name: str, kind: str, annotations: dict[str, str]) -> None:
        """One JSON merge patch of `metadata.annotations` (idempotent, no resourceVersion precondition)."""
        self._call(
            f"cannot annotate {kind} {namespace}/{name}",
            "patch_namespaced_custom_object",
            ann.GROUP,
            ann.VERSION,
            namespace,
            plural,
            name,
            {"metadata": {"annotations": annotations}},
            _content_type=MERGE_PATCH,
        )


def _reason(exc: Any) -> str:
    """The Status message the API server sent, else the HTTP reason."""
    import json

    try:
        message = json.loads(exc.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or exc.reason or "")
