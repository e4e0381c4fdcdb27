"""The controllers' review of a layer's current plan (docs/architecture.md §5.9): the plan policies' verdict
and the drift state, computed here from the plan JSON the runner stored, never by the runner.

A plan is reviewed once: `status.policy.planSum` names the plan the verdict is about, and `status.policy.digest`
the policies it was computed with, so an Idle layer costs no datastore read and a policy change re-reviews the
plans it may judge. The review is also stored beside the plan in the datastore (`…/attempts/N/review`, which only
the controllers may write); decisions read the status, which only the controllers write too.

Split as the layer reconcile is (reconcile.py): `read_plan` gathers (the plan JSON, the sandbox's verdict),
`review_plan` decides (pure: the status, the events), `record_review` executes (the datastore copy, the metric).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from burrito_py.api import annotations as ann
from burrito_py.api.annotations import parse_plan_run
from burrito_py.controllers import metrics
from burrito_py.controllers.layer.decide import NO_CHANGES
from burrito_py.controllers.layer.plan_gate import PlanGate
from burrito_py.controllers.layer.run_view import RunView
from burrito_py.kube.inventory import Body
from burrito_py.kube.scheduler import slot_released
from burrito_py.plans.changes import changes_digest
from burrito_py.plans.drift import classify_drift
from burrito_py.plans.model import PlanFormatError, PlanModel, parse_plan
from burrito_py.policy.evaluate import policy_name
from burrito_py.policy.override import override_refusal
from burrito_py.policy.verdict import Verdict, rule_result
from burrito_py.timeutil import format_time

log = logging.getLogger(__name__)
EventType = Literal["Normal", "Warning"]

ADDRESSES_SHOWN = 20
# A plan that could not be read is reviewed again after this long (the datastore may be down).
RETRY_UNREADABLE = 30.0


@dataclass(frozen=True, slots=True)
class Override:
    """`api.burrito-py.io/override-policy`, as the server writes it for the principal it authenticated."""

    plan_sum: str
    user: str
    groups: tuple[str, ...] = ()


def parse_override(value: str | None) -> Override | None:
    if not value:
        return None
    try:
        data = json.loads(value)
        return Override(str(data["sum"]), str(data["user"]), tuple(str(g) for g in data.get("groups") or ()))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


LEVELS = ("advisory", "gateAutoApply", "mandatory")


def strictest_level(policies: Sequence[Any]) -> str:
    """The metric's `level`: the strictest enforcement among the policies judging the plan; none without one."""
    levels = [LEVELS.index(p.spec.enforcement) for p in policies]
    return LEVELS[max(levels)] if levels else "none"


def policies_digest(policies: Sequence[Any]) -> str:
    """What the verdict depends on besides the plan: each selected policy's identity and generation."""
    keys = sorted(f"{p.KIND}/{p.namespace}/{p.name}/{p.metadata.get('generation') or 0}" for p in policies)
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]


def review_needed(status: Mapping[str, Any], annotations: Mapping[str, str], digest: str) -> bool:
    """A plan not reviewed yet; or one that may still be applied (it has changes and is not applied) and was
    reviewed with other policies or could not be read. An applied plan keeps its verdict: a policy change then
    costs no datastore read per layer at rest."""
    plan_sum = annotations.get(ann.PLAN_SUM) or None
    policy = status.get("policy") or {}
    if plan_sum is None:
        return False
    if policy.get("planSum") != plan_sum:
        return True
    pending = annotations.get(ann.APPLY_SUM) != plan_sum and annotations.get(ann.PLAN_SUMMARY) != NO_CHANGES
    return pending and (policy.get("digest") != digest or bool(policy.get("error")))


def code_changed(annotations: Mapping[str, str], runs: Mapping[str, RunView]) -> bool | None:
    """Whether the current plan was made at other code than the last apply's: the relevant commits stamped on
    the plan run and on that apply run, else the revisions (None: never applied, or nothing to compare). Other
    upstream inputs (dependencies, §5.11) are other code too: a plan for a changed upstream output is no drift."""
    applied = parse_plan_run(annotations.get(ann.APPLY_RUN))
    if not annotations.get(ann.APPLY_SUM) or applied is None:
        return None
    planned = parse_plan_run(annotations.get(ann.PLAN_RUN))
    plan_run = runs.get(planned[0]) if planned is not None else None
    apply_run = runs.get(applied[0])
    if plan_run is not None and apply_run is not None and plan_run.inputs_digest != apply_run.inputs_digest:
        return True
    if plan_run is not None and apply_run is not None and plan_run.relevant_commit and apply_run.relevant_commit:
        return plan_run.relevant_commit != apply_run.relevant_commit
    plan_commit, apply_commit = annotations.get(ann.PLAN_COMMIT), annotations.get(ann.APPLY_COMMIT)
    if plan_commit and apply_commit and plan_commit == apply_commit:
        return False
    return None


def drift_state(annotations: Mapping[str, str], facts: Mapping[str, Any]) -> str:
    """The layer's drift state now: the plan's classification, except that an applied plan is in sync."""
    plan_sum = annotations.get(ann.PLAN_SUM) or None
    if plan_sum is None or facts.get("planSum") != plan_sum:
        return "Unknown"
    if annotations.get(ann.APPLY_SUM) == plan_sum:
        return "InSync"
    return str(facts.get("classified") or "Unknown")


def drift_status(previous: Mapping[str, Any] | None, state: str, facts: Mapping[str, Any], now: datetime) -> Body:
    """`status.drift`: `since` is kept while the layer stays Drifted."""
    previous = previous or {}
    since = previous.get("since") if previous.get("state") == "Drifted" else None
    body: Body = {
        "state": state,
        "since": (since or format_time(now)) if state == "Drifted" else None,
        "lastCheck": facts.get("planDate"),
        "planSum": facts.get("planSum"),
        "resources": int(facts.get("resources") or 0) if state == "Drifted" else 0,
        "addresses": list(facts.get("addresses") or ())[:ADDRESSES_SHOWN] if state == "Drifted" else [],
    }
    return {k: v for k, v in body.items() if v is not None}


def plan_facts(model: PlanModel | None, plan_sum: str, plan_date: str | None, changed: bool | None) -> Body:
    """What the drift state needs of the plan, kept in `status.policy.plan` so it is read once."""
    if model is None:
        return {"planSum": plan_sum, "planDate": plan_date, "classified": "Unknown"}
    changing = sorted(rc.address for rc in model.changed())
    return {
        "planSum": plan_sum,
        "summary": model.summary(),
        "planDate": plan_date,
        "classified": classify_drift(model, code_changed=changed),
        "resources": len(changing),
        "addresses": changing[:ADDRESSES_SHOWN],
        "updateOnly": all(rc.action in ("update", "no-op", "read") for rc in model.changed()),
        # What an apply would change, whatever the plan's sum: lifts an apply's exhaustion only when it differs.
        "changesDigest": changes_digest(model),
    }


def unreadable_verdict(policies: Sequence[Any], plan_sum: str, error: str) -> Verdict:
    """Fail closed: a plan the controllers cannot read is judged an error by every policy that selects it."""
    results = [rule_result(policy_name(p), p.KIND, "(plan)", p.spec.enforcement, "error", [], [error])
               for p in policies]
    return Verdict.of(plan_sum, results)


def policy_status(verdict: Verdict, selected: int, digest: str, facts: Body, error: str | None) -> Body:
    view = verdict.status_view()
    body: Body = {**view, "policies": selected, "digest": digest, "plan": facts}
    if error:
        body["error"] = error[:300]
    return body


def gate_reason(policy: Mapping[str, Any]) -> str:
    """The rules behind a gating verdict: `policy/rule (addresses…)`, names only; for a rule stopped by a
    limit, the sandbox's sentence naming it."""
    parts = []
    for finding in policy.get("denied") or ():
        if finding.get("error"):  # a limit the rule exceeded, in the controllers' words (policy/sandbox.py)
            parts.append(str(finding["error"]))
            continue
        addresses = list(finding.get("addresses") or ())
        shown = ", ".join(addresses[:3]) + (", …" if len(addresses) > 3 else "")
        parts.append(f"{finding.get('policy')}/{finding.get('rule')}" + (f" ({shown})" if shown else ""))
    if not parts:
        parts = [f"{w.get('policy')}/{w.get('rule')}" for w in policy.get("warned") or ()]
    return "; ".join(parts)[:500]


def gate_of(policy: Mapping[str, Any] | None, annotations: Mapping[str, str]) -> PlanGate | None:
    """The decision's view of the review (None until the current plan is reviewed)."""
    plan_sum = annotations.get(ann.PLAN_SUM) or None
    if not policy or plan_sum is None or policy.get("planSum") != plan_sum:
        return None
    facts = policy.get("plan") or {}
    override = policy.get("override") or {}
    return PlanGate(
        plan_sum=plan_sum,
        verdict=str(policy.get("verdict") or "Allowed"),
        reason=gate_reason(policy),
        drift_state=drift_state(annotations, facts),
        update_only=bool(facts.get("updateOnly")),
        resources=int(facts.get("resources") or 0),
        override_by=override.get("by") if override.get("planSum") == plan_sum else None,
        changes_digest=facts.get("changesDigest"),
    )


@dataclass(frozen=True, slots=True)
class PlanReading:
    """What reviewing the current plan had to read and run (`read_plan`): the verdict of the policies on it and
    what the drift state needs of it, or why it could not be read."""

    verdict: Verdict
    facts: Body
    error: str | None = None
    readable: bool = True  # False: judged an error by every policy (fail closed), reviewed again soon


@dataclass
class Review:
    """What a reconcile learnt of the current plan: the status to write and the events to post."""

    policy: Body | None
    drift: Body | None
    events: list[tuple[EventType, str, str]] = field(default_factory=list)  # (type, reason, message)
    retry_in: float | None = None
    # A new verdict: kept beside the plan in the datastore and counted (`record_review`), once.
    reading: PlanReading | None = None
    level: str = "none"


async def read_plan(ctx: Any, layer: Mapping[str, Any], runs: Mapping[str, RunView], policies: Sequence[Any]
                    ) -> PlanReading | None:
    """Gathering: when the current plan needs a review (`review_needed`), read its JSON from the datastore once
    and run the policies on it in the sandbox; None when it needs none."""
    meta = layer["metadata"]
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    plan_sum = annotations.get(ann.PLAN_SUM) or None
    if plan_sum is None or recording(annotations, runs):
        return None
    if not review_needed(layer.get("status") or {}, annotations, policies_digest(policies)):
        return None
    changed = code_changed(annotations, runs)
    model, error = await _read_plan(ctx, meta["namespace"], meta["name"], annotations, runs)
    facts = plan_facts(model, plan_sum, annotations.get(ann.PLAN_DATE), changed)
    if model is None:
        return PlanReading(unreadable_verdict(policies, plan_sum, error or "the plan could not be read"), facts, error,
                           readable=False)
    # CEL and Rego rules in the policy sandbox's worker processes, under its limits; waiting for them holds no
    # slot of the layers' queue (another tenant's slow policy must not hold up this layer).
    async with slot_released():
        verdict = await ctx.sandbox.evaluate(policies, model, namespace=meta["namespace"], plan_sum=plan_sum,
                                             drift_correction=changed is False)
    return PlanReading(verdict, facts, error)


# Why an override is not honoured where no admission policy guards the annotation (settings.admission_policy).
UNGUARDED_OVERRIDE = ("the admission policy that lets only the burrito-py server write the override is off "
                      "(admissionPolicy.enabled=false), so who wrote it cannot be told: no override is honoured")


def review_plan(
    layer: Mapping[str, Any], runs: Mapping[str, RunView], policies: Sequence[Any], reading: PlanReading | None,
    now: datetime, overrides_guarded: bool = True,
) -> Review:
    """Deciding (pure): the review of the layer's current plan, from this reconcile's reading of it when it needed
    one (`read_plan`), else from the status; what annotations change is recomputed (the drift state after an
    apply, an override). `overrides_guarded`: the admission policy lets only the server write the override (off:
    anyone who may patch the layer could name an `overrideBy` user, so none is honoured)."""
    meta = layer["metadata"]
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    status: Mapping[str, Any] = layer.get("status") or {}
    plan_sum = annotations.get(ann.PLAN_SUM) or None
    if plan_sum is None or recording(annotations, runs):
        return Review(status.get("policy"), status.get("drift"))
    policy: Body = dict(status.get("policy") or {})
    events: list[tuple[EventType, str, str]] = []
    retry_in = None
    if reading is not None:
        if not reading.readable:
            retry_in = RETRY_UNREADABLE
        policy = policy_status(reading.verdict, len(policies), policies_digest(policies), reading.facts, reading.error)
        events += _verdict_events(reading.verdict, policy)
    # The server checked the principal when it wrote the override; checked again here against the policies
    # the controllers hold (an annotation written around the server, where no admission policy guards it).
    override = parse_override(annotations.get(ann.OVERRIDE_POLICY))
    previous_override = (status.get("policy") or {}).get("override")
    policy.pop("override", None)
    policy.pop("overrideRefused", None)
    if override is not None and override.plan_sum == plan_sum and policy.get("verdict") == "Denied":
        refusal = override_refusal(policy.get("denied") or (), overrides_allowed(policies), override.user,
                                   override.groups) if overrides_guarded else f"{override.user}: {UNGUARDED_OVERRIDE}"
        if refusal is None:
            policy["override"] = {"by": override.user, "planSum": plan_sum}
            if previous_override != policy["override"]:
                events.append(("Normal", "PolicyOverridden",
                               f"{override.user} overrode the mandatory denial of plan {plan_sum}"))
        else:
            policy["overrideRefused"] = override.user
            if (status.get("policy") or {}).get("overrideRefused") != override.user:
                events.append(("Warning", "OverrideRefused", refusal))
    state = drift_state(annotations, policy.get("plan") or {})
    drift = drift_status(status.get("drift"), state, policy.get("plan") or {}, now)
    events += _drift_events(status.get("drift"), drift)
    return Review(policy, drift, events, retry_in, reading, strictest_level(policies))


async def record_review(ctx: Any, layer: Mapping[str, Any], review: Review | None) -> None:
    """Executing: a new verdict is counted and kept beside the plan in the datastore (for people and the UI)."""
    if review is None or review.reading is None:
        return
    meta = layer["metadata"]
    reading = review.reading
    metrics.PLAN_POLICY_VERDICTS.labels(review.level, reading.verdict.result).inc()
    await _store(ctx, meta["namespace"], meta["name"], meta.get("annotations") or {}, reading.verdict, reading.facts)


def overrides_allowed(policies: Sequence[Any]) -> dict[str, tuple[Sequence[str], Sequence[str]]]:
    """Policy name → (users, groups) of its `overrideBy`."""
    allowed: dict[str, tuple[Sequence[str], Sequence[str]]] = {}
    for p in policies:
        by = p.spec.override_by
        allowed[policy_name(p)] = (tuple(by.users), tuple(by.groups)) if by is not None else ((), ())
    return allowed


def _verdict_events(verdict: Verdict, policy: Mapping[str, Any]) -> list[tuple[EventType, str, str]]:
    if verdict.result in ("Denied", "GatesAutoApply"):
        return [("Warning", "PolicyDenied" if verdict.result == "Denied" else "PolicyGatesAutoApply",
                 f"plan {verdict.plan_sum}: {gate_reason(policy)}"[:1000])]
    if verdict.result == "Warned":
        return [("Normal", "PolicyWarned", f"plan {verdict.plan_sum}: {gate_reason(policy)}"[:1000])]
    return []


def _drift_events(previous: Mapping[str, Any] | None, drift: Mapping[str, Any]) -> list[tuple[EventType, str, str]]:
    before = (previous or {}).get("state")
    if drift.get("state") == "Drifted" and before != "Drifted":
        addresses = list(drift.get("addresses") or ())
        shown = ", ".join(addresses[:5]) + (", …" if len(addresses) > 5 else "")
        return [("Warning", "DriftDetected", f"{drift.get('resources', 0)} resource(s) drifted: {shown}"[:1000])]
    # DriftResolved is posted with its notification (layers.py): a drift may end through a code change, which
    # this transition (Drifted → CodeChange → InSync) cannot see.
    return []


def recording(annotations: Mapping[str, str], runs: Mapping[str, RunView]) -> bool:
    """The run that made the plan is still live: the run controller writes the layer's annotations just before
    it records the attempt in the run's status (run_results.py); the plan is reviewed once it has."""
    where = parse_plan_run(annotations.get(ann.PLAN_RUN))
    run = runs.get(where[0]) if where is not None else None
    return run is not None and not run.terminal


def recorded_json(annotations: Mapping[str, str], runs: Mapping[str, RunView], limit: int
                  ) -> tuple[str, int, str, int] | str:
    """(run, attempt, the plan JSON's recorded sum and size) of the plan `plan-run` names, if the controllers recorded
    its JSON and it is within `limit` bytes; else why the review cannot read it (pure). The JSON is tied to the
    binary by the run controller's record of both sums for that attempt, and objects are written once, so what
    is reviewed is what an apply would take (§5.9)."""
    where = parse_plan_run(annotations.get(ann.PLAN_RUN))
    if where is None:
        return "no plan run recorded"
    run = runs.get(where[0])
    if run is None or run.result_attempt != where[1] or not run.result_json_sum:
        return f"the controllers recorded no plan JSON for run {where[0]} attempt {where[1]}"
    if run.result_sum != annotations.get(ann.PLAN_SUM):
        return f"plan-sum is not the sum recorded for run {where[0]} attempt {where[1]}"
    size = run.result_json_size
    if size is None or size > limit:
        return (f"the plan JSON is {size if size is not None else 'of unknown size'} bytes, above the "
                f"{limit} bytes the controllers read (maxPlanJsonBytes): it is not parsed")
    return where[0], where[1], run.result_json_sum, size


async def _read_plan(
    ctx: Any, namespace: str, name: str, annotations: Mapping[str, str], runs: Mapping[str, RunView]
) -> tuple[PlanModel | None, str | None]:
    from burrito_py.datastore.client import DatastoreError

    if ctx.datastore is None:
        return None, "no datastore"
    limit = int(ctx.settings.max_plan_json_bytes)
    found = recorded_json(annotations, runs, limit)
    if isinstance(found, str):
        return None, f"the plan JSON is not reviewed: {found}"
    run, attempt, expected, size = found
    try:
        async with ctx.parse_budget.hold(size):
            # Read only up to the limit, and only if its bytes have the recorded sum: never parse anything else.
            raw = await asyncio.to_thread(ctx.datastore.get_plan_verified, namespace, name, run, attempt, "json",
                                          limit, expected)
            return await asyncio.to_thread(parse_plan, raw), None
    except DatastoreError as exc:
        log.warning("layer %s/%s: cannot read plan %s/%s: %s", namespace, name, run, attempt, exc)
        return None, f"the plan JSON cannot be read: {exc}"
    except PlanFormatError as exc:
        return None, f"the plan JSON is invalid: {exc}"


async def _store(
    ctx: Any, namespace: str, name: str, annotations: Mapping[str, str], verdict: Verdict, facts: Body
) -> None:
    """Keep the review beside the plan (for people and the UI; decisions read the status)."""
    from burrito_py.datastore.client import DatastoreError

    where = parse_plan_run(annotations.get(ann.PLAN_RUN))
    if ctx.datastore is None or where is None:
        return
    body = json.dumps({"verdict": verdict.model_dump(mode="json"), "plan": facts}).encode()
    try:
        await asyncio.to_thread(ctx.datastore.put_review, namespace, name, where[0], where[1], body)
    except DatastoreError as exc:
        log.warning("layer %s/%s: could not store the review of %s: %s", namespace, name, where[0], exc)
