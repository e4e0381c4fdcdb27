"""`kubectl apply --server-side` in a few lines: used by `burrito-py dev` to load manifests and CRDs."""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

from burrito_local.kube_authn import ADMIN_TOKEN

APPLY_PATCH = "application/apply-patch+yaml"


class ApplyError(Exception):
    pass


def load_documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def load_files(paths: Iterable[Path]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in paths:
        files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path]
        for file in files:
            docs.extend(load_documents(file.read_text()))
    return docs


class Applier:
    """`served_timeout`: how long to wait for a kind that is not served yet — a kind an
    ApplicationDefinition applied just before serves once the AGL controller has created its CRD."""

    def __init__(self, base_url: str, field_manager: str = "burrito-py-dev", served_timeout: float = 0.0,
                 token: str = ADMIN_TOKEN, verify: ssl.SSLContext | bool = True) -> None:
        # The emulator's bootstrap admin by default: applying manifests is what a cluster admin does.
        # `verify`: the real control plane's CA (its API is HTTPS only).
        self._http = httpx.Client(base_url=base_url, timeout=30.0, headers={"Authorization": f"Bearer {token}"},
                                  verify=verify)
        self._field_manager = field_manager
        self._served_timeout = served_timeout
        self._resources: dict[tuple[str, str], tuple[str, bool]] = {}

    def close(self) -> None:
        self._http.close()

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        deadline = time.monotonic() + self._served_timeout
        while True:
            try:
                return self._discover(api_version, kind)
            except ApplyError:
                if time.monotonic() >= deadline:
                    raise
            time.sleep(0.2)

    def _discover(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) from discovery, cached per group version."""
        if (api_version, kind) not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            response = self._http.get(base)
            if response.status_code != 200:
                raise ApplyError(f"{api_version} is not served by the API server ({response.status_code})")
            for resource in response.json().get("resources", []):
                if "/" not in resource["name"]:
                    self._resources[(api_version, resource["kind"])] = (resource["name"], resource["namespaced"])
        if (api_version, kind) not in self._resources:
            raise ApplyError(f"kind {kind} is not served in {api_version}")
        return self._resources[(api_version, kind)]

    def apply(self, doc: Mapping[str, Any], default_namespace: str = "default") -> dict[str, Any]:
        api_version, kind = doc.get("apiVersion", ""), doc.get("kind", "")
        name = (doc.get("metadata") or {}).get("name")
        if not api_version or not kind or not name:
            raise ApplyError("every manifest needs apiVersion, kind and metadata.name")
        plural, namespaced = self._resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        body = json.loads(json.dumps(doc))
        if namespaced:
            namespace = body["metadata"].setdefault("namespace", default_namespace)
            url = f"{base}/namespaces/{namespace}/{plural}/{name}"
        else:
            url = f"{base}/{plural}/{name}"
        response = self._http.patch(
            url,
            content=json.dumps(body),
            headers={"Content-Type": APPLY_PATCH},
            params={"fieldManager": self._field_manager, "force": "true"},
        )
        if response.status_code not in (200, 201):
            message = response.json().get("message", response.text) if response.content else response.reason_phrase
            raise ApplyError(f"{kind} {name}: {message}")
        result: dict[str, Any] = response.json()
        if kind == "CustomResourceDefinition":
            self._resources.clear()  # discovery changed
        return result
