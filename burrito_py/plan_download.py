"""`burrito-py plan download`: how people fetch a layer's latest plan from the datastore."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer_decisions import parse_plan_run


class PlanNotFound(Exception):
    pass


def parse_layer_ref(ref: str) -> tuple[str, str]:
    namespace, _, name = ref.rpartition("/")
    if not name:
        raise ValueError(f"expected NAMESPACE/LAYER or LAYER, got {ref!r}")
    return namespace or "default", name


def read_layer(namespace: str, name: str, kubeconfig: Path | None) -> dict[str, Any]:
    from kubernetes import client, config

    try:
        config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    api = client.CustomObjectsApi()
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
    datastore_url: str,
    kubeconfig: Path | None = None,
    token: str | None = None,
) -> None:
    from burrito_py.datastore.client import DatastoreClient

    namespace, name = parse_layer_ref(ref)
    attempt: int | None = None
    if run is None:
        layer = read_layer(namespace, name, kubeconfig)
        planned = parse_plan_run((layer["metadata"].get("annotations") or {}).get(ann.PLAN_RUN))
        if planned is None:
            raise PlanNotFound(f"layer {namespace}/{name} has no successful plan yet")
        run, attempt = planned
    with DatastoreClient(datastore_url, token=token) as store:
        if output is None:
            sys.stdout.buffer.write(store.get_plan(namespace, name, run, attempt, fmt))  # type: ignore[arg-type]
            sys.stdout.flush()
        else:
            store.download_plan(namespace, name, run, attempt, fmt, output)  # type: ignore[arg-type]
