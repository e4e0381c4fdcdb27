"""Reaching one of our Services through the Kubernetes API server's service proxy
(`/api/v1/namespaces/{ns}/services/{name}:{port}/proxy/`) with nothing but a kubeconfig, as a kubectl plugin
does: no port-forward, no URL to copy. The API server authenticates and authorizes the caller (`get` on
`services/proxy`) and drops its `Authorization` header, so the caller's token travels to the datastore in
`X-Burrito-Py-Authorization`, which the datastore reviews like any bearer token."""

from __future__ import annotations

import ssl
from typing import Any

# The chart's labels on the datastore Service (and its conventional name when listing Services is not allowed).
RELEASE_NAMESPACE = "burrito-py-system"
DATASTORE_SELECTOR = "app.kubernetes.io/name=burrito-py,app.kubernetes.io/component=datastore"
DATASTORE_SERVICE = ("burrito-py-datastore", "8080")
SERVER_SELECTOR = "app.kubernetes.io/name=burrito-py,app.kubernetes.io/component=server"
SERVER_SERVICE = ("burrito-py-server", "8081")


class ServiceNotFound(Exception):
    pass


def find_datastore(configuration: Any, namespace: str) -> tuple[str, str]:
    """(Service name, port) of the datastore in the release namespace `namespace`: found by the chart's labels,
    else the conventional `burrito-py-datastore:8080` when the caller may not list Services."""
    return find_service(configuration, namespace, DATASTORE_SELECTOR, DATASTORE_SERVICE, "datastore",
                        "--datastore-url")


def find_server(configuration: Any, namespace: str) -> tuple[str, str]:
    """(Service name, port) of the server (REST API) in the release namespace: as `find_datastore`."""
    return find_service(configuration, namespace, SERVER_SELECTOR, SERVER_SERVICE, "server", "--server-url")


def find_service(configuration: Any, namespace: str, selector: str, conventional: tuple[str, str], what: str,
                 option: str) -> tuple[str, str]:
    from kubernetes import client

    with client.ApiClient(configuration) as api_client:
        try:
            found = client.CoreV1Api(api_client).list_namespaced_service(namespace, label_selector=selector)
        except client.ApiException as exc:
            if exc.status == 403:
                return conventional
            raise
        services: list[dict[str, Any]] = api_client.sanitize_for_serialization(found).get("items") or []
    if not services:
        raise ServiceNotFound(
            f"no burrito-py {what} Service in namespace {namespace!r} (labels {selector}); pass "
            f"--release-namespace (BURRITO_PY_NAMESPACE) for the namespace burrito-py is installed in, or {option}"
        )
    names = sorted(str(s["metadata"]["name"]) for s in services)
    if len(names) > 1:
        raise ServiceNotFound(f"several burrito-py {what} Services in namespace {namespace!r} "
                              f"({', '.join(names)}); pass {option}")
    ports = (services[0].get("spec") or {}).get("ports") or []
    port = next((p for p in ports if p.get("name") == "http"), ports[0] if ports else None)
    if port is None:
        raise ServiceNotFound(f"Service {namespace}/{names[0]} has no port")
    return names[0], str(port["port"])


def proxy_url(configuration: Any, namespace: str, service: str, port: str) -> str:
    return f"{configuration.host.rstrip('/')}/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy"


def tls_context(configuration: Any) -> ssl.SSLContext | None:
    """The kubeconfig's trust and client certificate for the API server (None: plain http)."""
    if not str(configuration.host).startswith("https://"):
        return None
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    return context


def proxy_headers(token: str | None) -> dict[str, str]:
    """The API server's credentials, and the same token again for the datastore behind the proxy."""
    if not token:
        return {}
    return {"Authorization": f"Bearer {token}", PROXIED_AUTHORIZATION: f"Bearer {token}"}


PROXIED_AUTHORIZATION = "X-Burrito-Py-Authorization"
