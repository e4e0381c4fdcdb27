"""The plan policies the controllers hold (fed by watches, like the inventory), which ones judge a layer, and
the policies' own status.

Bodies are parsed once per resourceVersion; a policy that does not parse is left out and logged (its own
status says why). Cluster policies with a `namespaceSelector` need the namespace's labels: read from the API
and kept for a minute, so a burst of reviews in one namespace costs one GET.

Status (`reconcile_plan_policy`): condition Ready, True when the policy validates and each of its CEL and Rego
rules compiles, else False naming the rule and the compiler's words; `observedGeneration`. Compiled in the
policy sandbox (a parser meets the tenant's text first), once per generation: the result is kept here, and a
status that already describes the generation is not recomputed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from burrito_py.api import annotations as ann
from burrito_py.api.policy import ClusterTerraformPlanPolicy, TerraformPlanPolicy
from burrito_py.kube.client import Kube, KubeError, crd_path, path
from burrito_py.kube.conditions import Cond, merge_conditions
from burrito_py.kube.events import post_event
from burrito_py.kube.inventory import Body, Key, Store, key_of
from burrito_py.policy.sandbox import SandboxUnavailable
from burrito_py.policy.select import select_policies
from burrito_py.timeutil import utcnow

if TYPE_CHECKING:
    from burrito_py.controllers.context import Context

log = logging.getLogger(__name__)
NAMESPACE_LABELS_TTL = 60.0
# A policy that could not be compiled (no worker could start) is looked at again after this long.
RETRY_UNCOMPILED = 30.0
READY_MESSAGE_CHARS = 1000

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
        labels: dict[str, str] = {}
        if any(p.spec.namespace_selector is not None for p in cluster):
            labels = await self._labels_of(kube, namespace)
        named = [n.strip() for n in str((meta.get("annotations") or {}).get(ann.LAYER_PLAN_POLICIES) or "").split(",")
                 if n.strip()]
        chosen = select_policies(namespace, dict(meta.get("labels") or {}), labels, namespaced, cluster, named)
        return sorted(chosen, key=lambda p: (p.KIND != TerraformPlanPolicy.KIND, p.namespace or "", p.name))

    async def _labels_of(self, kube: Kube, namespace: str) -> dict[str, str]:
        held = self._namespace_labels.get(namespace)
        if held is not None and time.monotonic() - held[0] < NAMESPACE_LABELS_TTL:
            return held[1]
        try:
            body = await kube.get(path("v1", "namespaces", namespace)) or {}
        except KubeError as exc:
            log.warning("cannot read the labels of namespace %s for cluster plan policies: %s", namespace, exc)
            return held[1] if held is not None else {}
        labels = dict((body.get("metadata") or {}).get("labels") or {})
        self._namespace_labels[namespace] = (time.monotonic(), labels)
        return labels


def _validation_text(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        parts.append(f"{where}: {str(error['msg']).removeprefix('Value error, ')}" if where else str(error["msg"]))
    return "; ".join(parts)


async def readiness(ctx: Context, body: Body) -> Cond | None:
    """The policy's Ready condition; None when it cannot be told now (no policy worker could start)."""
    model: type[Policy] = ClusterTerraformPlanPolicy if body.get("kind") == ClusterTerraformPlanPolicy.KIND \
        else TerraformPlanPolicy
    try:
        policy = model.model_validate(body)
    except ValidationError as exc:
        return Cond("Ready", False, "Invalid", f"the policy is invalid and judges nothing: {_validation_text(exc)}"
                    [:READY_MESSAGE_CHARS])
    try:
        errors = await ctx.sandbox.compile(policy)
    except SandboxUnavailable as exc:
        log.warning("%s %s: cannot compile its rules now: %s", model.KIND, "/".join(key_of(body)), exc)
        return None
    if errors:
        message = "; ".join(f"rule {rule}: {error}" for rule, error in errors)
        return Cond("Ready", False, "CompileFailed", message[:READY_MESSAGE_CHARS])
    rules = len(policy.spec.rules)
    return Cond("Ready", True, "Compiled", f"{rules} rule{'s' if rules != 1 else ''}, each valid")


async def reconcile_plan_policy(ctx: Context, key: Key) -> None:
    """Write the policy's Ready condition and observedGeneration, once per generation."""
    body = ctx.policies.get(key)
    if body is None:
        return
    meta = body["metadata"]
    generation = int(meta.get("generation") or 0)
    status = body.get("status") or {}
    conditions = status.get("conditions") or ()
    if status.get("observedGeneration") == generation and any(c.get("type") == "Ready" for c in conditions):
        return  # already describes this generation (written by us, perhaps before a restart)
    cache = (str(body.get("kind")), meta.get("namespace") or "", meta["name"], generation)
    ready = ctx.policies.readiness.get(cache)
    if ready is None:
        ready = await readiness(ctx, body)
        if ready is None:
            ctx.wake_plan_policy(key, RETRY_UNCOMPILED)
            return
        ctx.policies.readiness[cache] = ready
        if len(ctx.policies.readiness) > 4 * (len(ctx.policies.namespaced) + len(ctx.policies.cluster)) + 64:
            held = {(str(b.get("kind")), b["metadata"].get("namespace") or "", b["metadata"]["name"],
                     int(b["metadata"].get("generation") or 0)) for store in (ctx.policies.namespaced,
                                                                           ctx.policies.cluster) for b in store}
            ctx.policies.readiness = {k: v for k, v in ctx.policies.readiness.items() if k in held}
    plural = ClusterTerraformPlanPolicy.PLURAL if not key[0] else TerraformPlanPolicy.PLURAL
    patch = {"status": {"conditions": merge_conditions(conditions, (ready,), utcnow()),
                        "observedGeneration": generation}}
    try:
        updated = await ctx.kube.merge_patch(crd_path(plural, key[0] or None, key[1], "status"), patch)
    except KubeError as exc:
        if exc.status == 404:
            return  # deleted meanwhile
        raise
    ctx.policies.store_of(updated).observe(updated)
    if not ready.status:
        await post_event(ctx.kube, updated, "Warning", ready.reason, ready.message)
