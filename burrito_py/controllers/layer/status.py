"""A TerraformLayer's status as its decision makes it (pure): `compute_status`, the events a change of status
calls for (`announcements`), and the patch that writes it. The reconcile (reconcile.py) only writes them."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from burrito_py.api import annotations as ann
from burrito_py.api.annotations import parse_plan_run
from burrito_py.controllers.layer.artifact_check import CONDITION as ARTIFACT_CONDITION
from burrito_py.controllers.layer.artifact_check import REFUSED as ARTIFACT_REFUSED
from burrito_py.controllers.layer.decide import RETRY_LIMIT, Exhaustion, LayerDecision
from burrito_py.controllers.layer.destroy import DESTROY_PLAN_REFUSED
from burrito_py.controllers.layer.plan_review import Review
from burrito_py.controllers.layer.run_view import RunView, run_view
from burrito_py.controllers.run.pod_creation import blocked_message
from burrito_py.kube.conditions import Cond, merge_conditions
from burrito_py.kube.inventory import Body

Event = tuple[Literal["Normal", "Warning"], str, str]  # (type, reason, message)

STATUS_KEYS = (
    "state",
    "conditions",
    "lastResult",
    "lastRun",
    "latestRuns",
    "lastPlan",
    "pendingPlan",
    "exhaustedPlan",
    "exhaustedApply",
    "policy",
    "drift",
    "notified",
    "appliedRevision",
    "dependencies",
    "inputsDigest",
    "runCreation",
    "reviewedPlan",
)


def exhaustion_record(value: Mapping[str, Any] | None) -> Exhaustion | None:
    """`status.exhaustedPlan` / `status.exhaustedApply` as the decision reads it."""
    if not value or not value.get("run"):
        return None
    return Exhaustion(
        run=str(value["run"]),
        key=str(value.get("key") or ""),
        reason=str(value.get("reason") or RETRY_LIMIT),
        message=str(value.get("message") or ""),
        relevant_commit=value.get("relevantCommit"),
        stale_count=int(value.get("staleCount") or 0),
        changes_digest=value.get("changesDigest"),
        inputs_digest=value.get("inputsDigest"),
    )


def exhaustion_status(record: Exhaustion | None) -> Body | None:
    if record is None:
        return None
    body: Body = {"run": record.run, "key": record.key, "reason": record.reason, "message": record.message[:1000]}
    if record.relevant_commit:
        body["relevantCommit"] = record.relevant_commit
    if record.stale_count:
        body["staleCount"] = record.stale_count
    if record.changes_digest:
        body["changesDigest"] = record.changes_digest
    if record.inputs_digest:
        body["inputsDigest"] = record.inputs_digest
    return body


def run_ref(run: Mapping[str, Any]) -> Body:
    view = run_view(run)
    return {"name": view.name, "action": view.action, "date": view.created or None, "revision": view.revision}


def last_result(previous: str | None, annotations: Mapping[str, str], last: RunView | None,
                reviewed: Mapping[str, Any] | None = None) -> str | None:
    """`reviewed`: `status.policy.plan`, the controllers' own reading of the plan (§5.9); its summary wins over
    the runner's annotation for the plan it is about."""
    if last is None:
        return previous
    if last.operation and last.action != "plan":  # a day-2 operation (§5.12) says what it did
        if last.state == "Failed":
            return f"Operation failed: {last.operation}: {last.message}"[:300].rstrip(": ")
        if last.state == "Succeeded":
            return f"Operation succeeded: {last.operation}"[:300]
        return previous
    if last.state == "Failed":
        return f"{last.action.capitalize()} failed: {last.message}"[:300].rstrip(": ")
    if last.state == "Succeeded":
        summary = annotations.get(ann.PLAN_SUMMARY, "")
        if reviewed and reviewed.get("summary") and reviewed.get("planSum") == annotations.get(ann.PLAN_SUM):
            summary = str(reviewed["summary"])
        return f"Applied: {summary}".rstrip(": ") if last.action == "apply" else (summary or "Plan succeeded")
    return previous


def compute_status(
    layer: Mapping[str, Any], decision: LayerDecision, ready: Cond, runs: Sequence[Body], now: datetime,
    review: Review | None = None,
) -> Body:
    old = layer.get("status") or {}
    a = layer["metadata"].get("annotations") or {}
    views = [run_view(r) for r in runs]
    status: Body = {
        "state": decision.state,
        "conditions": merge_conditions(old.get("conditions"), (ready, *decision.conditions), now),
        "lastResult": last_result(old.get("lastResult"), a, views[0] if views else None,
                                  ((review.policy if review is not None else old.get("policy")) or {}).get("plan")),
        # A live run whose pod the API refuses says why (runs helper, issue 11 item 9): not a silent Running.
        **({"lastResult": blocked} if runs and (blocked := blocked_message(runs[0])) else {}),
        "lastRun": run_ref(runs[0]) if runs else None,
        "latestRuns": [run_ref(r) for r in runs],
        "lastPlan": None,
        "exhaustedPlan": exhaustion_status(decision.exhausted_plan),
        "exhaustedApply": exhaustion_status(decision.exhausted_apply),
        "policy": review.policy if review is not None else old.get("policy"),
        "drift": review.drift if review is not None else old.get("drift"),
        "notified": old.get("notified"),
        "appliedRevision": decision.applied_revision,
        "dependencies": ([s.to_status() for s in decision.dependencies.standings]
                         if decision.dependencies is not None else None),
        "inputsDigest": decision.inputs_digest,
        "runCreation": old.get("runCreation"),  # the reconcile sets it (run_creation.py); kept otherwise
        # What the last merged pull request meant for the plan (reviewed.py), kept once the plan is gone: the pull
        # request controller tells it on the pull request.
        "reviewedPlan": reviewed_status(decision) or old.get("reviewedPlan"),
    }
    if a.get(ann.PLAN_SUM):
        plan_run = parse_plan_run(a.get(ann.PLAN_RUN))
        status["lastPlan"] = {
            "sum": a[ann.PLAN_SUM],
            "revision": a.get(ann.PLAN_COMMIT),
            "date": a.get(ann.PLAN_DATE),
            "run": plan_run[0] if plan_run else None,
        }
    if decision.pending_plan is not None:
        pending = decision.pending_plan
        status["pendingPlan"] = {"sum": pending.sum, "run": pending.run, "revision": pending.revision,
                                 **({"reason": pending.reason} if pending.reason else {})}
    return {k: v for k, v in status.items() if v is not None}


def reviewed_status(decision: LayerDecision) -> Body | None:
    verdict = decision.reviewed
    if verdict is None:
        return None
    return {"pullRequest": verdict.pull_request, "number": verdict.number, "headSha": verdict.head_sha,
            "planSum": verdict.plan_sum, "result": verdict.result, "message": verdict.message[:1000]}


def announcements(old: Mapping[str, Any], new: Mapping[str, Any], ready: Cond) -> list[Event]:
    """Events on state changes and on newly found problems (not on every reconcile), posted with the status write."""
    events: list[Event] = []
    old_ready = next((c for c in old.get("conditions") or () if c.get("type") == "Ready"), None)
    if not ready.status and (old_ready is None or old_ready.get("reason") != ready.reason):
        events.append(("Warning", ready.reason, ready.message))
    if old.get("state") != new.get("state") and new.get("state"):
        events.append(("Normal", "StateChanged", f"{old.get('state') or 'New'} -> {new['state']}"))
    # Once per failed run, when its exhaustion is recorded: a layer whose failed apply holds back its drift plans
    # comes back to MaxRetriesReached at every drift check (issue 25), and the failure was already told. Not on
    # entering that state: the record can come while a drift check already makes the layer PlanNeeded, and the
    # layer then reaches MaxRetriesReached later with the record unchanged, so the Warning was never posted.
    # The message names the run: a layer can hold two failed runs in a row (an apply refused as stale, then the
    # apply of its re-plan), each told once.
    if (failed := _failed_run(new)) and failed != _failed_run(old):
        events.append(("Warning", "MaxRetriesReached", f"run {failed}: {new.get('lastResult') or 'failed'}"))
    reviewed = new.get("reviewedPlan") or {}
    if reviewed and reviewed != (old.get("reviewedPlan") or {}):
        # Once per verdict: the plan applies as reviewed on the pull request, or waits and says why.
        events.append(("Normal", f"ReviewedPlan{reviewed.get('result')}", str(reviewed.get("message") or "")))
    for type_, problem in (("IsPlanApproved", "ApprovalMismatch"), ("HasDestroyFailed", "DestroyFailed"),
                           (ARTIFACT_CONDITION, ARTIFACT_REFUSED), ("HasDestroyFailed", DESTROY_PLAN_REFUSED),
                           ("OperationAccepted", "InvalidOperation"), ("OperationAccepted", "NothingToMigrate")):
        now_cond = condition_of(new, type_)
        if now_cond.get("reason") == problem and condition_of(old, type_).get("message") != now_cond.get("message"):
            events.append(("Warning", problem, str(now_cond.get("message") or "")))
    # A spec that disagrees with where a migration put the state (§10.6): said once, as it is not followed.
    location = condition_of(new, "StateLocation")
    if location.get("status") == "False" and condition_of(old, "StateLocation").get("message") != location.get(
            "message"):
        events.append(("Warning", "StateLocationDiffersFromSpec", str(location.get("message") or "")))
    return events


def event_name(layer: str, status: Mapping[str, Any], reason: str) -> str | None:
    """The name of an announcement told once per failed run (`MaxRetriesReached`), else None: the exhaustion record
    can come and go between reconciles (a drift check's run decides it meanwhile), and the same failed run's
    Warning told again is then the same Event, which the API refuses."""
    if reason != "MaxRetriesReached":
        return None
    key = hashlib.sha256(str(_failed_run(status)).encode()).hexdigest()[:16]
    return f"{layer[:200].rstrip('.-')}.max-retries-{key}"


def _failed_run(status: Mapping[str, Any]) -> str | None:
    """The run whose exhaustion the layer holds: its apply's, else its plan's."""
    plan_run, apply_run = _exhausted_runs(status)
    return apply_run or plan_run


def _exhausted_runs(status: Mapping[str, Any]) -> tuple[str | None, str | None]:
    return ((status.get("exhaustedPlan") or {}).get("run"), (status.get("exhaustedApply") or {}).get("run"))


def condition_of(status: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    return next((c for c in status.get("conditions") or () if c.get("type") == type_), {})


def status_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return any(new.get(k) != old.get(k) for k in STATUS_KEYS)


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> Body:
    """The merge patch that writes `new` over `old`."""
    patch: Body = {"status": {k: new.get(k) for k in STATUS_KEYS}}
    old_pending, new_pending = old.get("pendingPlan"), new.get("pendingPlan")
    if isinstance(old_pending, dict) and isinstance(new_pending, dict):
        # A merge patch keeps the keys it does not name: a `reason` the plan no longer has must be removed.
        patch["status"]["pendingPlan"] = {**{k: None for k in old_pending if k not in new_pending}, **new_pending}
    return patch
