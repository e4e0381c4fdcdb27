"""The few Kubernetes API reads the datastore makes itself: its encryption keys and, for retention, the
layers, runs and repositories that still reference artifacts. Plain dicts, as the API sends them."""

from __future__ import annotations

import asyncio
import importlib
import sys
import threading
from typing import TYPE_CHECKING, Any

from burrito_py.api.annotations import GROUP, VERSION

if TYPE_CHECKING:
    from kubernetes_asyncio import client

# The Kubernetes client (kubernetes_asyncio) takes half a second of CPU to import: the datastore imports it only
# when it needs it (auth on, retention or keys from a Secret), and never in its event loop's thread, so that it
# listens, answers its readiness probe and serves without waiting for it (`dev`'s chart mode waited on it, issue 31).
CLIENT_MODULE = "kubernetes_asyncio.client"


_done = threading.Event()  # the client is imported whole (a module is in sys.modules while it is being imported)


def _import() -> None:
    importlib.import_module(CLIENT_MODULE)  # waits for an import under way in another thread
    _done.set()


def warm_up() -> None:
    """Start importing the client in a thread of its own (for the first token review, which comes later)."""
    if not _done.is_set() and CLIENT_MODULE not in sys.modules:
        threading.Thread(target=_import, name="import-kube-client", daemon=True).start()


async def imported() -> None:
    """Once the client is imported whole: waited for in a worker thread when it is not yet (or is being imported by
    `warm_up`'s), so the event loop goes on serving."""
    if not _done.is_set():
        await asyncio.to_thread(_import)


class KubeApiError(Exception):
    pass


async def connect(kubeconfig: str | None = None) -> client.ApiClient:
    """Kubeconfig ($KUBECONFIG or the given file) first, the pod's service account otherwise."""
    await imported()
    from kubernetes_asyncio import client, config

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
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        secret = await client.CoreV1Api(api).read_namespaced_secret(name, namespace)
    except ApiException as exc:
        raise KubeApiError(f"Secret {namespace}/{name}: cannot read it ({exc.status} {exc.reason})") from None
    return dict(secret.data or {})


async def list_custom(api: client.ApiClient, plural: str) -> list[dict[str, Any]]:
    """Every object of one of our kinds, in all namespaces."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        result = await client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, plural)
    except ApiException as exc:
        raise KubeApiError(f"cannot list {plural}: {exc.status} {exc.reason}") from None
    items: list[dict[str, Any]] = result.get("items") or []
    return items
