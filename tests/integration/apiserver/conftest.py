"""Shared fixtures of the emulator's own suite: raw HTTP, the `kubernetes` client, kubectl, a test CRD."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from burrito_local.apiserver import ApiServer

GROUP = "example.com"
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"
CMS = "/api/v1/namespaces/default/configmaps"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}
STRATEGIC = {"Content-Type": "application/strategic-merge-patch+json"}

WIDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["branch"],
            "properties": {
                "branch": {"type": "string", "minLength": 1, "pattern": "^[a-z0-9/-]+$"},
                "mode": {"type": "string", "enum": ["plan", "apply"], "default": "plan"},
                "replicas": {"type": "integer", "minimum": 0, "default": 1},
                "repository": {"type": "object", "properties": {"name": {"type": "string"}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "items": {"type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}}, "required": ["name"]}},
            },
        },
        "status": {
            "type": "object",
            "properties": {"state": {"type": "string"}, "observedGeneration": {"type": "integer"}},
        },
    },
}


def widget_crd(versions: tuple[str, ...] = ("v1",)) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wg"],
                      "categories": ["all"]},
            "versions": [
                {
                    "name": v,
                    "served": True,
                    "storage": i == 0,
                    "schema": {"openAPIV3Schema": WIDGET_SCHEMA},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "State", "type": "string", "jsonPath": ".status.state"},
                        {"name": "Repository", "type": "string", "jsonPath": ".spec.repository.name"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                }
                for i, v in enumerate(versions)
            ],
        },
    }


def widget(name: str = "w", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": name},
            "spec": {"branch": "main", **spec}}


def cm(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


@pytest.fixture
def http(apiserver: ApiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=apiserver.url, timeout=10, headers=apiserver.admin_headers) as client:
        yield client


@pytest.fixture
def widgets(http: httpx.Client) -> str:
    """Register the Widget CRD; returns the namespaced collection path."""
    assert http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=widget_crd()).status_code == 201
    return WIDGETS


@pytest.fixture
def kube(apiserver: ApiServer) -> Iterator[Any]:
    """A `kubernetes` ApiClient from the kubeconfig the `apiserver` fixture wrote."""
    from kubernetes import config

    client = config.new_client_from_config(config_file=os.environ["KUBECONFIG"])
    yield client
    client.close()


KubectlRun = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def kubectl(apiserver: ApiServer) -> KubectlRun:
    def run(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["kubectl", "--kubeconfig", os.environ["KUBECONFIG"], *args],
            input=stdin, capture_output=True, text=True, timeout=60,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done

    return run


def stream_lines(server: ApiServer, path: str, params: dict[str, str], count: int,
                 started: Callable[[], None] | None = None, timeout: float = 10) -> list[dict[str, Any]]:
    """Open a watch and read `count` NDJSON events (or until the stream ends)."""
    events: list[dict[str, Any]] = []
    with httpx.stream("GET", server.url + path, params=params, timeout=timeout,
                      headers=server.admin_headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
        if started is not None:
            started()
        for line in response.iter_lines():
            if line:
                events.append(json.loads(line))
            if len(events) >= count:
                break
    return events
