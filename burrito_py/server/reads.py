"""Reads the REST API and the UI share: a layer's runs as the controllers order them, and where the datastore
keeps a run's artifacts."""

from __future__ import annotations

import re
from collections.abc import Callable

from burrito_py.api import annotations as ann
from burrito_py.controllers.inventory import creation_order
from burrito_py.controllers.kube import Body, Kube, crd_path
from burrito_py.server.views import run_layer

# DNS-1123 label (namespaces) and subdomain (object names), as the Kubernetes API validates them.
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
NAME = re.compile(NAME_PATTERN)
NAMESPACE = re.compile(NAMESPACE_PATTERN)


class NoArtifacts(Exception):
    """The run names no layer whose artifacts the server may read (the message says why)."""


async def layer_runs(kube: Kube, namespace: str, name: str) -> list[Body]:
    """The layer's TerraformRuns, newest first (ordered as the controllers order them, sub-second ties too)."""
    selector = f"{ann.LABEL_LAYER}={ann.layer_label(name)}"  # a hash for names over 63 characters
    runs = await kube.list(crd_path("terraformruns", namespace), label_selector=selector)
    runs.sort(key=creation_order, reverse=True)
    # The label is how the controllers find a layer's runs; spec.layer confirms it.
    return [r for r in runs if run_layer(r) == (namespace, name)]


def artifacts_of(run: Body, visible: Callable[[str], bool]) -> tuple[str, str]:
    """(namespace, layer) under which the datastore keeps the run's plans and logs. Both come from the run's
    spec, which whoever may create runs writes: they become datastore path segments, read with the server's
    own (admin) token, so anything but a valid namespace and name (`/`, `..`, `#`, `?`) would let a run
    point the server at another object — another layer's outputs, say."""
    layer_ns, layer = run_layer(run)
    name = f"{run['metadata']['namespace']}/{run['metadata']['name']}"
    if layer is None or not NAME.fullmatch(layer) or len(layer) > 253 or not NAMESPACE.fullmatch(layer_ns):
        raise NoArtifacts(f"TerraformRun {name} names no valid layer, so it has no plans or logs")
    if not visible(layer_ns):
        raise NoArtifacts(f"TerraformRun {name} is for a layer in {layer_ns}, a namespace this server does not "
                          "manage")
    return layer_ns, layer
