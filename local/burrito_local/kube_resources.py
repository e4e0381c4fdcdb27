"""What the API emulator serves: resource definitions, the built-ins, and CRD → resources."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from burrito_local.kube_schema import CompiledSchema

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
COMMON_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
POD_FIELDS = frozenset(
    {
        "status.phase",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.podIP",
        "status.nominatedNodeName",
    }
)
EVENT_FIELDS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)


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
    schema: CompiledSchema | None = None
    printer_columns: list[dict[str, Any]] = field(default_factory=list)
    subresources: list[str] = field(default_factory=list)
    verbs: list[str] = field(default_factory=lambda: list(VERBS))
    field_selectors: frozenset[str] = COMMON_FIELDS
    returns_deleted_object: bool = False  # DELETE answers with the object rather than a Success Status
    custom: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str, str]:
        """Route key: one per served version."""
        return self.group, self.version, self.plural

    @property
    def storage(self) -> tuple[str, str]:
        """Storage key: the versions of one resource share their objects, as in etcd."""
        return self.group, self.plural

    def discovery(self) -> list[dict[str, Any]]:
        entry: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": self.verbs,
        }
        if self.short_names:
            entry["shortNames"] = self.short_names
        if self.categories:
            entry["categories"] = self.categories
        subs = [*(["status"] if self.status_subresource else []), *self.subresources]
        sub_verbs = {"status": ["get", "patch", "update"], "log": ["get"], "token": ["create"], "binding": ["create"],
                     "scale": ["get", "patch", "update"], "proxy": ["create", "delete", "get", "patch", "update"]}
        sub_groups = {"token": {"group": "authentication.k8s.io", "version": "v1"},
                      "scale": {"group": "autoscaling", "version": "v1"}}
        return [
            entry,
            *(
                {
                    "name": f"{self.plural}/{s}",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": {"log": "Pod", "token": "TokenRequest", "scale": "Scale", "binding": "Binding"}.get(
                        s, self.kind),
                    "verbs": sub_verbs.get(s, ["get"]),
                    **sub_groups.get(s, {}),
                }
                for s in subs
            ),
        ]


def builtins() -> list[Resource]:
    return [
        Resource("", "v1", "namespaces", "namespace", "Namespace", False, ["ns"], status_subresource=True,
                 returns_deleted_object=True),
        Resource("", "v1", "pods", "pod", "Pod", True, ["po"], ["all"], True, subresources=["log", "binding"],
                 field_selectors=COMMON_FIELDS | POD_FIELDS, returns_deleted_object=True),
        Resource("", "v1", "secrets", "secret", "Secret", True, field_selectors=COMMON_FIELDS | {"type"}),
        Resource("", "v1", "configmaps", "configmap", "ConfigMap", True, ["cm"]),
        Resource("", "v1", "events", "event", "Event", True, ["ev"], field_selectors=COMMON_FIELDS | EVENT_FIELDS),
        Resource("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", True, ["sa"],
                 subresources=["token"]),
        Resource("", "v1", "services", "service", "Service", True, ["svc"], ["all"], status_subresource=True,
                 subresources=["proxy"]),
        # Workloads (controller_manager.py makes Deployments' pods, Endpoints and PVC binding; the rest are
        # stored only).
        Resource("apps", "v1", "deployments", "deployment", "Deployment", True, ["deploy"], ["all"], True,
                 subresources=["scale"]),
        Resource("", "v1", "endpoints", "endpoints", "Endpoints", True, ["ep"]),
        Resource("", "v1", "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", True,
                 ["pvc"], status_subresource=True),
        Resource("policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", True,
                 ["pdb"], status_subresource=True),
        Resource("networking.k8s.io", "v1", "networkpolicies", "networkpolicy", "NetworkPolicy", True,
                 ["netpol"]),
        Resource("networking.k8s.io", "v1", "ingresses", "ingress", "Ingress", True, ["ing"],
                 status_subresource=True),
        Resource("events.k8s.io", "v1", "events", "event", "Event", True, ["ev"],
                 field_selectors=COMMON_FIELDS | {"regarding.kind", "regarding.name", "regarding.namespace",
                                                  "regarding.uid", "reason", "type"}),
        Resource("coordination.k8s.io", "v1", "leases", "lease", "Lease", True),
        Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "customresourcedefinition",
                 "CustomResourceDefinition", False, ["crd", "crds"], status_subresource=True,
                 returns_deleted_object=True),
        Resource("authentication.k8s.io", "v1", "tokenreviews", "tokenreview", "TokenReview", False,
                 verbs=["create"]),
        Resource("authentication.k8s.io", "v1", "selfsubjectreviews", "selfsubjectreview", "SelfSubjectReview",
                 False, verbs=["create"]),
        Resource("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "selfsubjectaccessreview",
                 "SelfSubjectAccessReview", False, verbs=["create"]),
        Resource("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "selfsubjectrulesreview",
                 "SelfSubjectRulesReview", False, verbs=["create"]),
        Resource("authorization.k8s.io", "v1", "subjectaccessreviews", "subjectaccessreview",
                 "SubjectAccessReview", False, verbs=["create"]),
        Resource("authorization.k8s.io", "v1", "localsubjectaccessreviews", "localsubjectaccessreview",
                 "LocalSubjectAccessReview", True, verbs=["create"]),
        # Stored, and enforced on writes by kube_admission_policy (through Store._admit).
        Resource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "validatingadmissionpolicy",
                 "ValidatingAdmissionPolicy", False, status_subresource=True),
        Resource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
                 "validatingadmissionpolicybinding", "ValidatingAdmissionPolicyBinding", False),
        Resource("rbac.authorization.k8s.io", "v1", "roles", "role", "Role", True),
        Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding", True),
        Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole", False),
        Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "clusterrolebinding",
                 "ClusterRoleBinding", False),
    ]


def resources_from_crd(crd: Mapping[str, Any]) -> list[Resource]:
    """One Resource per served version of a CustomResourceDefinition."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    found = []
    for version in spec.get("versions") or ():
        if not version.get("served", True):
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        selectable = {f.get("jsonPath", "").lstrip(".") for f in version.get("selectableFields") or ()}
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
                schema=CompiledSchema(schema) if isinstance(schema, dict) else None,
                printer_columns=list(version.get("additionalPrinterColumns") or ()),
                field_selectors=COMMON_FIELDS | selectable,
                returns_deleted_object=True,
                custom=True,
            )
        )
    return found


def storage_version(crd: Mapping[str, Any]) -> str | None:
    for version in (crd.get("spec") or {}).get("versions") or ():
        if version.get("storage"):
            return str(version["name"])
    return None
