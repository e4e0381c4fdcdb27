"""The plan policies the controllers hold (namespaced and cluster-wide), parsed once per resourceVersion, and
which of them judge a layer's plans (plan_review.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from burrito_py.api import annotations as ann
from burrito_py.api.policy import ClusterTerraformPlanPolicy, TerraformPlanPolicy
from burrito_py.kube.client import Kube, KubeError, path
from burrito_py.kube.conditions import Cond
from burrito_py.kube.inventory import Body, Key, Store, key_of
from burrito_py.policy.select import select_policies

log = logging.getLogger(__name__)
NAMESPACE_LABELS_TTL = 60.0

Policy = TerraformPlanPolicy | ClusterTerraformPlanPolicy


class PolicyBook:
    def __init__(self) -> None:
        self.namespaced = Store()
        self.cluster = Store()
        self._parsed: dict[tuple[str, str, str, str], Policy | None] = {}
        self._namespace_labels: dict[str, tuple[float, dict[str, str]]] = {}
        # (kind, namespace, name, generation) -> its Ready condition: compiled once per generation.
        self.readiness: dict[tuple[str, str, str, int], Cond] = {}

    def store_of(self, body: Mapping[str, Any]) -> Store:
        return self.cluster if body.get("kind") == ClusterTerraformPlanPolicy.KIND else self.namespaced

    def get(self, key: Key) -> Body | None:
        """A policy by key: ("", name) is a cluster policy (no namespaced one has an empty namespace)."""
        return (self.namespaced if key[0] else self.cluster).get(key)

    def _parse(self, body: Body, model: type[Policy]) -> Policy | None:
        meta = body["metadata"]
        key = (model.KIND, meta.get("namespace") or "", meta["name"], str(meta.get("resourceVersion", "")))
        if key not in self._parsed:
            try:
                self._parsed[key] = model.model_validate(body)
            except ValidationError as exc:
                log.warning("%s %s is invalid and judges nothing: %s", model.KIND, "/".join(key_of(body)), exc)
                self._parsed[key] = None
            if len(self._parsed) > 4 * (len(self.namespaced) + len(self.cluster)) + 64:
                held = {(m.KIND, b["metadata"].get("namespace") or "", b["metadata"]["name"],
                         str(b["metadata"].get("resourceVersion", "")))
                        for m, store in ((TerraformPlanPolicy, self.namespaced),
                                         (ClusterTerraformPlanPolicy, self.cluster)) for b in store}
                self._parsed = {k: v for k, v in self._parsed.items() if k in held}
        return self._parsed.get(key)

    async def for_layer(self, kube: Kube, layer: Mapping[str, Any]) -> list[Policy]:
        """The policies that judge `layer`'s plans, namespaced ones first, each list in name order."""
        meta = layer["metadata"]
        namespace = str(meta.get("namespace") or "")
        namespaced = [p for b in self.namespaced if b["metadata"].get("namespace") == namespace
                      and isinstance(p := self._parse(b, TerraformPlanPolicy), TerraformPlanPolicy)]
        cluster = [p for b in self.cluster
                   if isinstance(p := self._parse(b, ClusterTerraformPlanPolicy), ClusterTerraformPlanPolicy)]
        if not namespaced and not cluster:
            return []
        labels: dict[str, str] | None = {}
        if any(p.spec.namespace_selector is not None for p in cluster):
            labels = await self._labels_of(kube, namespace)
        named = [n.strip() for n in str((meta.get("annotations") or {}).get(ann.LAYER_PLAN_POLICIES) or "").split(",")
                 if n.strip()]
        chosen = select_policies(namespace, dict(meta.get("labels") or {}), labels, namespaced, cluster, named)
        return sorted(chosen, key=lambda p: (p.KIND != TerraformPlanPolicy.KIND, p.namespace or "", p.name))

    async def _labels_of(self, kube: Kube, namespace: str) -> dict[str, str] | None:
        """The namespace's labels; the last ones read when a read fails; None when none were ever read (then
        every namespaceSelector picks it: `select_policies` fails closed)."""
        held = self._namespace_labels.get(namespace)
        if held is not None and time.monotonic() - held[0] < NAMESPACE_LABELS_TTL:
            return held[1]
        try:
            body = await kube.get(path("v1", "namespaces", name=namespace)) or {}
        except KubeError as exc:
            log.warning("cannot read the labels of namespace %s for cluster plan policies (%s): %s", namespace,
                        "using the last ones read" if held is not None else
                        "every cluster policy with a namespaceSelector judges its layers until they are read", exc)
            return held[1] if held is not None else None
        labels = dict((body.get("metadata") or {}).get("labels") or {})
        self._namespace_labels[namespace] = (time.monotonic(), labels)
        return labels
