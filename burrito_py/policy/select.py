"""Which policies judge a layer (pure): a namespaced policy its own namespace's layers, a cluster policy the
layers of the namespaces its namespaceSelector picks; both then by their layerSelector."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from burrito_py.api.policy import ClusterTerraformPlanPolicy, TerraformPlanPolicy

__all__ = ["select_policies"]


def select_policies(
    namespace: str,
    layer_labels: Mapping[str, str],
    namespace_labels: Mapping[str, str] | None,
    namespaced: Sequence[TerraformPlanPolicy],
    cluster: Sequence[ClusterTerraformPlanPolicy],
    named: Sequence[str] = (),
) -> list[TerraformPlanPolicy | ClusterTerraformPlanPolicy]:
    """`named`: cluster policies an AGL layer's ApplicationDefinition names; they judge it whatever their
    selectors say. `namespace_labels` None: the labels could not be read, and a `namespaceSelector` is taken to
    pick the namespace (fail closed: a policy that might apply judges the plan rather than none judging it)."""
    labels = dict(layer_labels)
    ns_labels = dict(namespace_labels) if namespace_labels is not None else None
    chosen: list[TerraformPlanPolicy | ClusterTerraformPlanPolicy] = [
        p for p in namespaced
        if p.namespace == namespace and (p.spec.layer_selector is None or p.spec.layer_selector.matches(labels))
    ]
    chosen += [
        p for p in cluster
        if p.name in named or (
            (p.spec.namespace_selector is None or ns_labels is None or p.spec.namespace_selector.matches(ns_labels))
            and (p.spec.layer_selector is None or p.spec.layer_selector.matches(labels)))
    ]
    return chosen
