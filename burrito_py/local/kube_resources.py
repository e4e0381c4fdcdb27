"""What the API emulator serves: resource definitions, built-ins, and CRD → resource translation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass
class Resource:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    status_subresource: bool = False
    schema: dict[str, Any] | None = None
    printer_columns: list[dict[str, Any]] = field(default_factory=list)
    subresources: list[str] = field(default_factory=list)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str, str]:
        return self.group, self.version, self.plural

    def discovery(self) -> list[dict[str, Any]]:
        entry = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": VERBS,
            "shortNames": self.short_names,
            "categories": self.categories,
        }
        subs = [*self.subresources, *(["status"] if self.status_subresource else [])]
        return [
            entry,
            *(
                {
                    "name": f"{self.plural}/{s}",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": ["get", "patch", "update"],
                }
                for s in subs
            ),
        ]


def builtins() -> list[Resource]:
    return [
        Resource("", "v1", "namespaces", "namespace", "Namespace", False, ["ns"], status_subresource=True),
        Resource("", "v1", "pods", "pod", "Pod", True, ["po"], ["all"], True, subresources=["log"]),
        Resource("", "v1", "secrets", "secret", "Secret", True),
        Resource("", "v1", "configmaps", "configmap", "ConfigMap", True, ["cm"]),
        Resource("", "v1", "events", "event", "Event", True, ["ev"]),
        Resource("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", True, ["sa"], subresources=["token"]),
        Resource("", "v1", "services", "service", "Service", True, ["svc"], status_subresource=True),
        Resource("events.k8s.io", "v1", "events", "event", "Event", True, ["ev"]),
        Resource("coordination.k8s.io", "v1", "leases", "lease", "Lease", True),
        Resource(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "customresourcedefinition",
            "CustomResourceDefinition",
            False,
            ["crd", "crds"],
            status_subresource=True,
        ),
        Resource("authentication.k8s.io", "v1", "tokenreviews", "tokenreview", "TokenReview", False),
    ]


def resources_from_crd(crd: Mapping[str, Any]) -> list[Resource]:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    found = []
    for version in spec.get("versions") or ():
        if not version.get("served", True):
            continue
        found.append(
            Resource(
                group=spec.get("group", ""),
                version=version["name"],
                plural=names.get("plural", ""),
                singular=names.get("singular") or names.get("kind", "").lower(),
                kind=names.get("kind", ""),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=list(names.get("shortNames") or ()),
                categories=list(names.get("categories") or ()),
                status_subresource="status" in (version.get("subresources") or {}),
                schema=(version.get("schema") or {}).get("openAPIV3Schema"),
                printer_columns=list(version.get("additionalPrinterColumns") or ()),
            )
        )
    return found
