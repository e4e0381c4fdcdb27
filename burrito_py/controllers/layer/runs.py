"""The runs a layer creates and deletes (pure): the deterministic name and body of a decided run, and the old runs
its history no longer keeps. A run body is stamped with the time it is built (`RUN_CREATED_AT`, its order among
the runs of one second)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.api.annotations import parse_plan_run
from burrito_py.controllers.layer.decide import CreateRun
from burrito_py.controllers.layer.run_view import run_view
from burrito_py.kube.inventory import Body
from burrito_py.timeutil import format_time_precise, utcnow

MAX_RUN_PREFIX = 40
# An action as it appears in a run's name: at most 7 characters, so `<layer[:40]>-<tag>-<10 hex>` stays ≤ 63.
NAME_TAGS = {"state-rm": "staterm", "state-mv": "statemv", "force-unlock": "unlock", "migrate-state": "migrate"}


def run_name(layer: Mapping[str, Any], create: CreateRun, newest_run: str | None, sync_now: str | None) -> str:
    """One decision → one name, so a create whose response was lost is found again (409) and adopted.

    The hash covers what makes the decision: the layer (uid), action, revision and plan sum, the sync-now
    request, and the newest run of the layer: once a run is created it is the newest, so the next decision
    (a drift or sync-now plan at the same revision) gets another name, while a retried decision (the watch has
    not shown the new run yet) gets the same one. The layer name is cut to keep the run name a valid label
    value (≤ 63) for `<run>` and its pods `<run>-<attempt>`."""
    meta = layer["metadata"]
    parts = (meta.get("uid", ""), meta["namespace"], meta["name"], create.action, create.revision,
             create.plan_sum or "", "destroy" if create.destroy else "", newest_run or "", sync_now or "",
             create.operation_digest or "")
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]
    prefix = meta["name"][:MAX_RUN_PREFIX].rstrip("-.")
    return f"{prefix}-{NAME_TAGS.get(create.action, create.action)}-{digest}"


def run_body(layer: Mapping[str, Any], create: CreateRun, name: str | None = None) -> Body:
    meta = layer["metadata"]
    spec: Body = {
        "action": create.action,
        "layer": {"name": meta["name"], "namespace": meta["namespace"], "revision": create.revision},
    }
    if create.artifact_run is not None:
        # The sum the run controller recorded for that attempt: the runner applies only a plan of this sum.
        spec["artifact"] = {"run": create.artifact_run, "attempt": create.artifact_attempt,
                            **({"sum": create.plan_sum} if create.plan_sum else {})}
    if create.destroy:
        spec["destroy"] = True
    if create.operation is not None:
        spec["operation"] = create.operation.to_dict()
    annotations = {
        ann.RUN_CREATED_AT: format_time_precise(utcnow()),
        ann.RUN_LAYER_GENERATION: str(meta.get("generation") or 0),
    }
    if create.relevant_commit:
        annotations[ann.RUN_RELEVANT_COMMIT] = create.relevant_commit
    if create.plan_sum:
        annotations[ann.RUN_PLAN_SUM] = create.plan_sum
    if create.inputs_digest:
        annotations[ann.RUN_INPUTS_DIGEST] = create.inputs_digest
    if create.changes_digest:
        annotations[ann.RUN_CHANGES_DIGEST] = create.changes_digest
    if create.operation_digest:
        annotations[ann.RUN_OPERATION] = create.operation_digest
    if create.sync_requested:
        annotations[ann.RUN_SYNC_NOW] = (meta.get("annotations") or {}).get(ann.SYNC_NOW) or "true"
    metadata: Body = {
        "namespace": meta["namespace"],
        "labels": {ann.LABEL_LAYER: ann.layer_label(meta["name"])},
        "annotations": annotations,
        "ownerReferences": [
            {
                "apiVersion": layer.get("apiVersion", ann.API_VERSION),
                "kind": "TerraformLayer",
                "name": meta["name"],
                "uid": meta["uid"],
                "blockOwnerDeletion": True,
            }
        ],
    }
    if name is not None:
        metadata["name"] = name
    else:
        metadata["generateName"] = f"{meta['name'][:MAX_RUN_PREFIX]}-{NAME_TAGS.get(create.action, create.action)}-"
    return {"apiVersion": ann.API_VERSION, "kind": "TerraformRun", "metadata": metadata, "spec": spec}


def runs_to_delete(runs: Sequence[Body], keep: int, annotations: Mapping[str, str]) -> list[Body]:
    """Older runs beyond `keep`, never a live one, the one holding the plan an apply would use, nor the last
    apply (its relevant commit tells a drift correction from a code change: plan_review.py)."""
    protected = {found[0] for key in (ann.PLAN_RUN, ann.APPLY_RUN)
                 if (found := parse_plan_run(annotations.get(key))) is not None}
    doomed = []
    for run in runs[keep:]:
        view = run_view(run)
        if not view.terminal or view.name in protected:
            continue
        doomed.append(run)
    return doomed
