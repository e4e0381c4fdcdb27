"""Helm's install order and the Deployment rollout check used when `burrito-py dev` installs the chart."""

from __future__ import annotations

from typing import Any

from burrito_local.install import deployment_available, install_order


def doc(kind: str, name: str = "x") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": name}}


def test_install_order_puts_what_workloads_need_first_and_unknown_kinds_last() -> None:
    docs = [doc("Deployment"), doc("ServiceMonitor"), doc("RoleBinding"), doc("Role"), doc("Service"),
            doc("CustomResourceDefinition"), doc("ConfigMap", "b"), doc("ServiceAccount"), doc("ConfigMap", "a"),
            doc("Namespace")]
    kinds = [(d["kind"], d["metadata"]["name"]) for d in install_order(docs)]
    assert kinds == [("Namespace", "x"), ("ServiceAccount", "x"), ("ConfigMap", "b"), ("ConfigMap", "a"),
                     ("CustomResourceDefinition", "x"), ("Role", "x"), ("RoleBinding", "x"), ("Service", "x"),
                     ("Deployment", "x"), ("ServiceMonitor", "x")]


def deployment(replicas: int, generation: int, **status: int) -> dict[str, Any]:
    return {"metadata": {"generation": generation}, "spec": {"replicas": replicas}, "status": status}


def test_available_only_when_the_newest_generation_is_rolled_out() -> None:
    assert deployment_available(deployment(2, 3, observedGeneration=3, updatedReplicas=2, availableReplicas=2))
    assert not deployment_available(deployment(2, 3, observedGeneration=2, updatedReplicas=2, availableReplicas=2))
    assert not deployment_available(deployment(2, 3, observedGeneration=3, updatedReplicas=1, availableReplicas=2))
    assert not deployment_available(deployment(2, 3, observedGeneration=3, updatedReplicas=2, availableReplicas=1))
    assert not deployment_available({"metadata": {"generation": 1}, "spec": {}, "status": {}})
