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
from typing import TYPE_CHECKING

from pydantic import ValidationError

from burrito_py.api.policy import ClusterTerraformPlanPolicy, TerraformPlanPolicy
from burrito_py.controllers.planpolicy.book import Policy
from burrito_py.kube.client import KubeError, crd_path
from burrito_py.kube.conditions import Cond, merge_conditions
from burrito_py.kube.events import post_event
from burrito_py.kube.inventory import Body, Key, key_of
from burrito_py.policy.sandbox import SandboxUnavailable
from burrito_py.timeutil import utcnow

if TYPE_CHECKING:
    from burrito_py.controllers.context import Context

log = logging.getLogger(__name__)
# A policy that could not be compiled (no worker could start) is looked at again after this long.
RETRY_UNCOMPILED = 30.0
READY_MESSAGE_CHARS = 1000



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
