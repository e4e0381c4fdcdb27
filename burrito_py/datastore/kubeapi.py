"""The few Kubernetes API reads the datastore makes itself: its encryption keys and, for retention, the
layers, runs and repositories that still reference artifacts. Plain dicts, as the API sends them."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from burrito_py.api.annotations import GROUP, VERSION


class KubeApiError(Exception):
    pass


async def connect(kubeconfig: str | None = None) -> client.ApiClient:
    """Kubeconfig ($KUBECONFIG or the given file) first, the pod's service account otherwise."""
    configuration = client.Configuration()
    try:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    except config.ConfigException:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException as exc:
            raise KubeApiError(f"no Kubernetes API configuration (KUBECONFIG or in-cluster): {exc}") from None
    return client.ApiClient(configuration=configuration)


async def read_secret_data(api: client.ApiClient, namespace: str, name: str) -> dict[str, str]:
    """The Secret's `data` (base64 values, never logged); a missing or unreadable Secret is named."""
    try:
        secret = await client.CoreV1Api(api).read_namespaced_secret(name, namespace)
    except ApiException as exc:
        raise KubeApiError(f"Secret {namespace}/{name}: cannot read it ({exc.status} {exc.reason})") from None
    return dict(secret.data or {})


async def list_custom(api: client.ApiClient, plural: str) -> list[dict[str, Any]]:
    """Every object of one of our kinds, in all namespaces."""
    try:
        result = await client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, plural)
    except ApiException as exc:
        raise KubeApiError(f"cannot list {plural}: {exc.status} {exc.reason}") from None
    items: list[dict[str, Any]] = result.get("items") or []
    return items
