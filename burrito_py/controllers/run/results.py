"""What an ended attempt leaves on its layer and in its run's status, decided by the run controller from what
the datastore holds, never from what the runner says (docs/architecture.md §6.4; issue 24, design item 1).

The runner writes nothing to the Kubernetes API. When an attempt ends, the run controller reads the facts it
needs from the datastore (the sums and sizes the datastore computed of the attempt's `plan.bin` and `plan.json`,
the one-line summary, whether outputs are stored, the applied record), and, before it marks the run Succeeded
(so the layer controller never sees a succeeded run without its result), writes the layer's
`runner.burrito-py.io/plan-*` / `apply-*` annotations and records the sums in the attempt's status entry. The
annotations keep their names and meanings; only who writes them changed.

`gather_facts` is the only I/O; `record_result` is pure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from burrito_py.api import annotations as ann
from burrito_py.api.operations import MIGRATION_TARGETS, OPERATION_ACTIONS
from burrito_py.plans.model import is_summary_line

if TYPE_CHECKING:
    from burrito_py.datastore.client import DatastoreClient, StoredObject

SUMMARY_MAX = 300  # one line, as a layer's lastResult shows it


class FactsUnavailable(Exception):
    """The datastore could not be asked now: the attempt is recorded at a later reconcile."""


@dataclass(frozen=True, slots=True)
class AttemptFacts:
    """What the datastore holds for one ended attempt (None: absent or not asked)."""

    plan: StoredObject | None = None
    plan_json: StoredObject | None = None
    summary: str | None = None
    outputs: bool = False
    applied: str | None = None  # the sum in the attempt's applied record


@dataclass(frozen=True, slots=True)
class Recorded:
    """The layer annotations to merge (None removes one; empty for a pull request's run), the fields to add to
    the attempt's status entry, and `problem`: why an attempt whose pod succeeded cannot count as a success."""

    annotations: dict[str, str | None] = field(default_factory=dict)
    attempt: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None


def artifact_sum(run: Mapping[str, Any]) -> str | None:
    """The plan sum an apply run carries: `spec.artifact.sum` (set by the controllers), else the run's
    `burrito-py.io/plan-sum` stamp (runs made before the spec field)."""
    artifact = (run.get("spec") or {}).get("artifact") or {}
    stamp = (run["metadata"].get("annotations") or {}).get(ann.RUN_PLAN_SUM)
    return str(artifact.get("sum") or stamp or "") or None


def one_line(summary: str) -> str:
    text = " ".join(summary.split())
    return text[:SUMMARY_MAX]


def _plan_annotations(run: Mapping[str, Any], number: int, finished_at: str, facts: AttemptFacts,
                      revision: str) -> dict[str, str | None]:
    assert facts.plan is not None and facts.summary is not None
    return {
        ann.PLAN_DATE: finished_at,
        ann.PLAN_SUM: facts.plan.sha256,
        ann.PLAN_RUN: f"{run['metadata']['name']}/{number}",
        ann.PLAN_COMMIT: revision,
        ann.PLAN_SUMMARY: one_line(facts.summary),
        ann.PLAN_DESTROY: "true" if (run.get("spec") or {}).get("destroy") else None,
    }


def _plan_fields(facts: AttemptFacts) -> dict[str, Any]:
    assert facts.plan is not None and facts.plan_json is not None
    return {"planSum": facts.plan.sha256, "planJsonSum": facts.plan_json.sha256, "planJsonSize": facts.plan_json.size}


def _missing_plan(number: int, facts: AttemptFacts) -> str | None:
    missing = [name for name, present in (("plan.bin", facts.plan), ("plan.json", facts.plan_json),
                                          ("its summary", facts.summary)) if present is None]
    if missing:
        return f"attempt {number} ended without storing {', '.join(missing)} in the datastore"
    # The runner writes it with the controllers' own code (plans/model.py): anything else is tenant code's text,
    # which the layer's annotation, lastResult and notifications would show.
    if facts.summary is not None and not is_summary_line(one_line(facts.summary)):
        return f"attempt {number} stored a summary that is not a plan's summary ('Plan: …' or 'No changes.')"
    return None


def record_result(run: Mapping[str, Any], number: int, succeeded: bool, finished_at: str, facts: AttemptFacts
                  ) -> Recorded:
    """Pure: what attempt `number` of `run` leaves, given the facts `gather_facts` read for it."""
    spec = run.get("spec") or {}
    action, revision = spec.get("action"), str((spec.get("layer") or {}).get("revision") or "")
    pull_request = bool(spec.get("pullRequest"))
    if action == "migrate-state":
        # A migration (§5.12, §10.6) leaves where the state now lives, written before the run says Succeeded: the
        # next run (created only once this one is terminal) uses that backend and no other. A failed one records
        # nothing: its source state was only read, and stays the layer's.
        to = (spec.get("operation") or {}).get("to")
        if not succeeded or pull_request or to not in MIGRATION_TARGETS:
            return Recorded()
        return Recorded({ann.STATE_LOCATION: str(to)})
    if action in OPERATION_ACTIONS:
        # A day-2 operation (§5.12) leaves its log only: the state it changed is the backend's, and the layer plans
        # again after it (controllers/layer/decide.py).
        return Recorded()
    if action == "plan":
        if not succeeded:
            return Recorded()
        problem = _missing_plan(number, facts)
        if problem is not None:
            return Recorded(problem=problem)
        annotations = {} if pull_request else _plan_annotations(run, number, finished_at, facts, revision)
        return Recorded(annotations, _plan_fields(facts))
    # An apply. A plan stored under the apply's own attempt: its runner planned itself (applyWithoutPlanArtifact)
    # and applied that plan; otherwise it applied its artifact, of the sum the run carries.
    self_planned = facts.plan is not None
    expected = facts.plan.sha256 if facts.plan is not None else artifact_sum(run)
    planned: dict[str, str | None] = {}
    fields: dict[str, Any] = {}
    if self_planned:
        missing = _missing_plan(number, facts)
        if missing is None:
            planned, fields = _plan_annotations(run, number, finished_at, facts, revision), _plan_fields(facts)
    applied = {ann.APPLY_DATE: finished_at, ann.APPLY_SUM: expected, ann.APPLY_COMMIT: revision}
    if not succeeded:
        # An attempt that applied and failed afterwards (say its outputs could not be stored) still records the
        # apply, so the layer never applies that plan again; its applied record says so, for the sum it carries.
        if expected is not None and facts.applied == expected:
            return Recorded({**planned, **applied}, {**fields, "appliedSum": expected})
        return Recorded()
    if expected is None:
        return Recorded(problem=f"apply run {run['metadata']['name']} carries no plan sum (spec.artifact.sum)")
    if not facts.outputs:
        return Recorded({**planned, **applied}, {**fields, "appliedSum": expected},
                        problem=f"attempt {number} applied but stored no outputs in the datastore")
    return Recorded({**planned, **applied, ann.APPLY_RUN: f"{run['metadata']['name']}/{number}"},
                    {**fields, "appliedSum": expected})


def migration_event(run: Mapping[str, Any], number: int, succeeded: bool, message: str
                    ) -> tuple[Literal["Normal", "Warning"], str, str] | None:
    """(type, reason, message) of the layer Event an ended attempt of a migrate-state run posts, else None."""
    spec = run.get("spec") or {}
    operation = spec.get("operation") or {}
    if spec.get("action") != "migrate-state" or operation.get("to") not in MIGRATION_TARGETS:
        return None
    to = operation["to"]
    target = "the burrito-py datastore" if to == "managed" else "the backend the layer's code declares"
    source = "the backend the layer's code declares" if to == "managed" else "the burrito-py datastore"
    who, name = operation.get("requestedBy") or "?", run["metadata"]["name"]
    if succeeded:
        return ("Normal", "StateMigrated", f"state migrated to {target} by run {name} (asked by {who}); every "
                f"resource instance kept; the copy left in {source} is no longer used")
    # The runner's own message already says the source is untouched; said here too for a pod that died silently.
    text = (f"migrate-state to {to}: attempt {number} of run {name} (asked by {who}) failed: "
            f"{message or 'see its log'}")
    if "untouched" not in text:
        text += f"; the source state in {source} is untouched and still the layer's state"
    return ("Warning", "StateMigrationFailed", text[:1000])


def facts_needed(action: str, succeeded: bool) -> tuple[str, ...]:
    """Which facts `record_result` reads for such an attempt."""
    if action in OPERATION_ACTIONS:
        return ()
    if action == "plan":
        return ("plan", "plan_json", "summary") if succeeded else ()
    # An apply that may have planned itself: its own plan first (absent when it applied its artifact).
    return ("plan", "plan_json", "summary", "outputs") if succeeded else ("plan", "plan_json", "summary", "applied")


async def gather_facts(store: DatastoreClient, namespace: str, layer: str, run: str, number: int,
                       needed: tuple[str, ...]) -> AttemptFacts:
    """Read what `needed` names for attempt `number` (in threads: the client is synchronous). Raises
    FactsUnavailable when the datastore cannot answer; an absent object is a fact (None)."""
    from burrito_py.datastore.client import DatastoreError, applied_sum

    def read() -> AttemptFacts:
        plan = store.stat_plan(namespace, layer, run, number, "bin") if "plan" in needed else None
        # An apply that applied its artifact stored no plan of its own: nothing else of a plan to read then.
        planned = "plan" not in needed or plan is not None
        plan_json = store.stat_plan(namespace, layer, run, number, "json") if "plan_json" in needed and planned \
            else None
        summary = None
        if "summary" in needed and planned:
            try:
                summary = store.get_plan(namespace, layer, run, number, "short").decode(errors="replace")
            except DatastoreError as exc:
                if exc.status_code != 404:
                    raise
        outputs = "outputs" in needed and store.stat_outputs(namespace, layer, run, number) is not None
        record = store.get_applied_record(namespace, layer, run, number) if "applied" in needed else None
        # A record that is not one (the runner wrote it) claims nothing.
        return AttemptFacts(plan, plan_json, summary, outputs, applied_sum(record) if record else None)

    try:
        return await asyncio.to_thread(read)
    except DatastoreError as exc:
        raise FactsUnavailable(str(exc)) from None
