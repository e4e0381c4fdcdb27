"""`burrito-py plan download`: how people fetch a layer's latest plan from the datastore."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from burrito_py.api import annotations as ann
from burrito_py.api.annotations import parse_plan_run
from burrito_py.kube.service_proxy import RELEASE_NAMESPACE, find_datastore, proxy_headers, proxy_url, tls_context

if TYPE_CHECKING:
    from burrito_py.datastore.client import DatastoreClient


class PlanNotFound(Exception):
    pass


def parse_layer_ref(ref: str) -> tuple[str, str]:
    namespace, _, name = ref.rpartition("/")
    if not name:
        raise ValueError(f"expected NAMESPACE/LAYER or LAYER, got {ref!r}")
    return namespace or "default", name


def load_kube_configuration(kubeconfig: Path | None) -> Any:
    """The kubeconfig's (or, in a pod, the in-cluster) client configuration."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig else None, client_configuration=configuration
        )
    except config.ConfigException:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return configuration


def kube_token(configuration: Any) -> str | None:
    """The bearer token the kubeconfig user presents (static, tokenFile or exec plugin alike): the datastore
    reviews the same identity the Kubernetes API sees."""
    # The key is "authorization" in older clients and "BearerToken" in kubernetes 37: take any bearer value.
    for value in (configuration.api_key or {}).values():
        scheme, _, token = str(value or "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


def read_layer(namespace: str, name: str, configuration: Any) -> dict[str, Any]:
    from kubernetes import client

    with client.ApiClient(configuration) as api_client:
        api = client.CustomObjectsApi(api_client)
        try:
            body: dict[str, Any] = dict(
                api.get_namespaced_custom_object(ann.GROUP, ann.VERSION, namespace, "terraformlayers", name)  # type: ignore[call-overload]
            )
        except client.ApiException as exc:
            if exc.status == 404:
                raise PlanNotFound(f"TerraformLayer {namespace}/{name} not found") from None
            raise
    return body


def download(
    ref: str,
    run: str | None,
    fmt: str,
    output: Path | None,
    datastore_url: str | None,
    kubeconfig: Path | None = None,
    token: str | None = None,
    release_namespace: str = RELEASE_NAMESPACE,
) -> None:
    """`token` defaults to the kubeconfig user's. Without `datastore_url`, the datastore is reached through the
    Kubernetes API's service proxy in `release_namespace` (`burrito_py.kube.service_proxy`)."""
    namespace, name = parse_layer_ref(ref)
    attempt: int | None = None
    needs_kube = run is None or token is None or datastore_url is None
    configuration = load_kube_configuration(kubeconfig) if needs_kube else None
    if token is None:
        token = kube_token(configuration)
    if run is None:
        layer = read_layer(namespace, name, configuration)
        planned = parse_plan_run((layer["metadata"].get("annotations") or {}).get(ann.PLAN_RUN))
        if planned is None:
            raise PlanNotFound(f"layer {namespace}/{name} has no successful plan yet")
        run, attempt = planned
    with datastore_client(datastore_url, token, configuration, release_namespace) as store:
        if output is None:
            sys.stdout.buffer.write(store.get_plan(namespace, name, run, attempt, fmt))  # type: ignore[arg-type]
            sys.stdout.flush()
        else:
            store.download_plan(namespace, name, run, attempt, fmt, output)  # type: ignore[arg-type]


def datastore_client(
    datastore_url: str | None, token: str | None, configuration: Any, release_namespace: str
) -> DatastoreClient:
    """The datastore at `datastore_url`, else through the API server's service proxy with the kubeconfig."""
    from burrito_py.datastore.client import DatastoreClient

    if datastore_url:
        return DatastoreClient(datastore_url, token=token)
    service, port = find_datastore(configuration, release_namespace)
    return DatastoreClient(
        proxy_url(configuration, release_namespace, service, port),
        headers=proxy_headers(token),
        verify=tls_context(configuration),
    )
