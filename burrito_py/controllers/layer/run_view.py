"""What the layer's decisions (decide.py) and its apply artifact check (artifact_check.py) read of a TerraformRun."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from burrito_py.api import annotations as ann
from burrito_py.api.operations import RunOperation, describe

TERMINAL_RUN_STATES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class RunView:
    """The few facts about a TerraformRun that layer decisions need."""

    name: str
    action: str
    state: str | None
    revision: str | None
    created: str = ""
    message: str = ""
    # A destroy plan (terraform plan -destroy), or the apply of one, made while the layer is deleted.
    destroy: bool = False
    # For an apply: the plan run it applies.
    artifact: str | None = None
    # metadata.generation of the layer when the run was created (a changed spec retries a failed destroy).
    layer_generation: int | None = None
    # The layer's relevant commit when the run was created (None on runs made before it was recorded).
    relevant_commit: str | None = None
    # For an apply: the sum of the plan it applies (None on runs made before it was recorded).
    plan_sum: str | None = None
    # The reason of its HasSucceeded condition (`StalePlan` for an apply refused as stale).
    reason: str = ""
    # The digest of the upstream outputs it was given (dependencies), None when it was given none.
    inputs_digest: str | None = None
    # For an apply: the digest of the changes its plan makes (plans/changes.py), None when not recorded.
    changes_digest: str | None = None
    # For a plan: made because someone asked (`sync-now`), not by a drift check or a commit.
    sync_requested: bool = False
    # What the apply artifact check reads (artifact_check.py): the uids of its TerraformLayer owner references,
    # its layer label, the layer its spec names, the pull request it plans for, and its last attempt when that
    # one succeeded with the plan sum the run controller recorded for it.
    owners: tuple[str, ...] = ()
    layer_label: str | None = None
    layer_name: str = ""
    layer_namespace: str | None = None
    pull_request: str | None = None
    result_attempt: int | None = None
    result_sum: str | None = None
    # The sum and size of that attempt's plan JSON, recorded with it (the review reads only that JSON).
    result_json_sum: str | None = None
    result_json_size: int | None = None
    # A day-2 operation's run (§5.12): one line saying what it does and who asked, the request's digest, and
    # whether it is a `-target` plan (the layer plans whole again after it).
    operation: str = ""
    operation_digest: str | None = None
    targeted: bool = False

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_RUN_STATES

    @property
    def failed(self) -> bool:
        # A run reaches `Failed` only once its retries are exhausted (docs/architecture.md §6).
        return self.state == "Failed"


def operation_line(spec: Mapping[str, Any]) -> str:
    """`state rm aws_instance.a (asked by alice)`, or "" for a run that is no operation."""
    raw = spec.get("operation")
    if not isinstance(raw, Mapping):
        return ""
    try:
        operation = RunOperation.model_validate(raw)
    except ValidationError:
        return f"{spec.get('action')} (an invalid spec.operation)"
    return f"{describe(str(spec.get('action')), operation)} (asked by {operation.requested_by})"


def run_view(run: Mapping[str, Any]) -> RunView:
    spec, status = run.get("spec") or {}, run.get("status") or {}
    conditions = status.get("conditions") or ()
    message = next((c.get("message", "") for c in conditions if c.get("type") == "HasSucceeded"), "")
    annotations = run["metadata"].get("annotations") or {}
    generation = annotations.get(ann.RUN_LAYER_GENERATION, "")
    succeeded: Mapping[str, Any] = next((c for c in conditions if c.get("type") == "HasSucceeded"), {})
    attempts = [a for a in status.get("attempts") or () if isinstance(a, Mapping)]
    # The last attempt, when it succeeded: what the run's status records as its result.
    result: Mapping[str, Any] = attempts[-1] if attempts and attempts[-1].get("exitCode") == 0 else {}
    return RunView(
        name=run["metadata"]["name"],
        action=spec.get("action", "plan"),
        state=status.get("state"),
        revision=(spec.get("layer") or {}).get("revision"),
        created=run["metadata"].get("creationTimestamp", ""),
        message=message,
        destroy=bool(spec.get("destroy")),
        artifact=(spec.get("artifact") or {}).get("run"),
        layer_generation=int(generation) if generation.isdigit() else None,
        relevant_commit=annotations.get(ann.RUN_RELEVANT_COMMIT) or None,
        plan_sum=annotations.get(ann.RUN_PLAN_SUM) or None,
        reason=succeeded.get("reason", "") if status.get("state") == "Failed" else "",
        inputs_digest=annotations.get(ann.RUN_INPUTS_DIGEST) or None,
        changes_digest=annotations.get(ann.RUN_CHANGES_DIGEST) or None,
        sync_requested=ann.RUN_SYNC_NOW in annotations,
        owners=tuple(str(ref.get("uid")) for ref in run["metadata"].get("ownerReferences") or ()
                     if ref.get("kind") == "TerraformLayer" and ref.get("uid")),
        layer_label=(run["metadata"].get("labels") or {}).get(ann.LABEL_LAYER),
        layer_name=str((spec.get("layer") or {}).get("name") or ""),
        layer_namespace=(spec.get("layer") or {}).get("namespace") or run["metadata"].get("namespace"),
        pull_request=spec.get("pullRequest") or None,
        result_attempt=int(result["number"]) if result.get("number") else None,
        result_sum=result.get("planSum"),
        result_json_sum=result.get("planJsonSum"),
        result_json_size=result.get("planJsonSize"),
        operation=operation_line(spec),
        operation_digest=annotations.get(ann.RUN_OPERATION) or None,
        targeted=bool((spec.get("operation") or {}).get("target")) if isinstance(spec.get("operation"), Mapping)
        else False,
    )
