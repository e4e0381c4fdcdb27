"""Installing rendered manifests into the emulator the way `helm install` does: kinds in Helm's install
order (namespaces, service accounts, config and RBAC before the workloads that need them), then waiting for
every Deployment to be Available."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from burrito_local.apply import Applier

Obj = dict[str, Any]

# Helm's `InstallOrder` (pkg/release/util/kind_sorter.go): kinds not listed go last, in their given order.
INSTALL_ORDER = (
    "PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy",
    "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass",
    "PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole", "ClusterRoleList",
    "ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList",
    "Service", "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment", "HorizontalPodAutoscaler",
    "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress", "APIService", "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
)
_RANK = {kind: rank for rank, kind in enumerate(INSTALL_ORDER)}


def install_order(docs: Iterable[Mapping[str, Any]]) -> list[Obj]:
    """The documents sorted as Helm installs them (stable: same-kind documents keep their order)."""
    listed = [dict(doc) for doc in docs]
    return sorted(listed, key=lambda doc: _RANK.get(str(doc.get("kind")), len(INSTALL_ORDER)))


def install(applier: Applier, docs: Iterable[Mapping[str, Any]], namespace: str) -> list[Obj]:
    """Server-side apply every document in install order; namespaced ones default to `namespace`."""
    return [applier.apply(doc, default_namespace=namespace) for doc in install_order(docs)]


def deployment_available(deployment: Mapping[str, Any]) -> bool:
    """Rolled out as `kubectl rollout status` means it: the newest generation observed, every replica
    updated and available."""
    meta, spec, status = deployment["metadata"], deployment.get("spec") or {}, deployment.get("status") or {}
    wanted = int(spec.get("replicas", 1))
    return (
        int(status.get("observedGeneration", 0)) >= int(meta.get("generation", 1))
        and int(status.get("updatedReplicas", 0)) >= wanted
        and int(status.get("availableReplicas", 0)) >= wanted
    )


def wait_available(http: httpx.Client, deployments: Iterable[tuple[str, str]], timeout: float) -> None:
    """Wait until each (namespace, name) Deployment is available; TimeoutError names the ones that are not."""
    pending = set(deployments)
    deadline = time.monotonic() + timeout
    while pending:
        for namespace, name in sorted(pending):
            response = http.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
            if response.status_code == 200 and deployment_available(response.json()):
                pending.discard((namespace, name))
        if not pending:
            return
        if time.monotonic() > deadline:
            names = ", ".join(f"{ns}/{name}" for ns, name in sorted(pending))
            raise TimeoutError(f"deployments not available after {timeout:.0f}s: {names}")
        time.sleep(0.1)
