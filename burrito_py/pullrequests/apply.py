"""Apply before merge (docs/architecture.md §11.3, "Apply before merge"; issue 30 item 3): pure.

A layer opts in (`spec.pullRequests.applyBeforeMerge`); `/burrito-py apply` on a pull request then applies exactly
the plan of the pull request's plan run that the comment shows (its recorded sum), as a TerraformRun of the pull
request with the layer's runner identity, under the layer's Lease; and the layer is locked to that pull request
(`PULL_REQUEST_LOCK` on the layer) until it merges or closes, or `/burrito-py unlock`.

This module holds what the command's decision, the pull request controller, the run controller (admission: the
last check before a runner pod gets the layer's credentials) and the layer controller (its applies wait while a
pull request holds it) agree on: the settings, the apply run's name, who holds a layer, and which apply may start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from burrito_py.api import annotations as ann

__all__ = [
    "APPLY_REQUIREMENTS",
    "apply_admission",
    "apply_run_name",
    "layer_apply_settings",
    "lock_holder",
    "release_due",
    "release_plan",
    "requirements_for",
]

APPLY_REQUIREMENTS = ("approved", "mergeable", "undiverged")
Key = tuple[str, str]
MERGE_RELEASE_WAIT = timedelta(minutes=10)


def layer_apply_settings(layer: Mapping[str, Any] | None) -> tuple[bool, tuple[str, ...]]:
    """(`spec.pullRequests.applyBeforeMerge`, its `applyRequirements`) of a layer; unset: (False, ())."""
    found = ((layer or {}).get("spec") or {}).get("pullRequests") or {}
    return found.get("applyBeforeMerge") is True, tuple(str(r) for r in found.get("applyRequirements") or ())


def requirements_for(repository: Sequence[str], layers: Sequence[Sequence[str]]) -> list[str]:
    """The apply requirements of an apply of `layers`: the repository's and each layer's, together (a layer adds
    requirements, never removes one), in their fixed order."""
    wanted = {*repository, *(r for layer in layers for r in layer)}
    return [r for r in APPLY_REQUIREMENTS if r in wanted]


def apply_run_name(pull_request: str, number: int, layer: Key, plan_sum: str) -> str:
    """`pr<n>-apply-<layer>-<hash>`: one name per pull request, layer and plan sum, so a redelivered or repeated
    apply command of the same plan meets the run it already made (409) and never applies twice."""
    digest = hashlib.sha256("\x00".join((pull_request, *layer, "apply", plan_sum)).encode()).hexdigest()[:10]
    return f"pr{number}-apply-{layer[1][:24].rstrip('-.')}-{digest}"


def lock_holder(layer: Mapping[str, Any], pull_requests: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The pull request holding `layer` (its `PULL_REQUEST_LOCK`), when that names a TerraformPullRequest of the
    layer's namespace (`pull_requests`: name → object). A merged or closed one holds it until the pull request
    controller releases it (`release_due`: a merged one once the branch has the merge, so no plan of the branch
    from before it is applied meanwhile); one that is gone holds nothing."""
    holder = ((layer.get("metadata") or {}).get("annotations") or {}).get(ann.PULL_REQUEST_LOCK)
    if not holder or str(holder) not in pull_requests:
        return None
    return str(holder)


def apply_admission(run: Mapping[str, Any], layer: Mapping[str, Any], pull_request: Mapping[str, Any] | None,
                    plan_run: Mapping[str, Any] | None) -> str | None:
    """None when a pull request's apply run may get a runner pod (with the layer's identity), else why not. Checked
    by the run controller before each attempt, whatever made the run: the pull request exists, is open and not a
    fork's; the layer opted in and is locked to it; the run applies the head the pull request has now; and its
    artifact is that pull request's successful plan of this layer at that head, with the sum recorded for it."""
    spec = run.get("spec") or {}
    name = str(spec.get("pullRequest") or "")
    layer_name = str((spec.get("layer") or {}).get("name") or "")
    if pull_request is None:
        return f"pull request {name} does not exist"
    pr_spec = pull_request.get("spec") or {}
    if pr_spec.get("state", "open") != "open":
        return f"pull request {name} is {pr_spec.get('state')}"
    if pr_spec.get("fromFork", True):
        return f"pull request {name} is a fork's: a fork's code is never applied"
    if not layer_apply_settings(layer)[0]:
        return f"layer {layer_name} does not allow apply before merge (spec.pullRequests.applyBeforeMerge)"
    holder = ((layer.get("metadata") or {}).get("annotations") or {}).get(ann.PULL_REQUEST_LOCK)
    if holder != name:
        return f"layer {layer_name} is not locked to pull request {name} ({ann.PULL_REQUEST_LOCK}: {holder or 'unset'})"
    head = str(pr_spec.get("headSha") or "")
    if (spec.get("layer") or {}).get("revision") != head:
        return f"the run applies {str((spec.get('layer') or {}).get('revision'))[:12]}, but the head is {head[:12]}"
    artifact = spec.get("artifact") or {}
    plan_spec = (plan_run or {}).get("spec") or {}
    if (plan_run is None or plan_spec.get("action") != "plan" or plan_spec.get("pullRequest") != name
            or (plan_spec.get("layer") or {}).get("name") != layer_name
            or (plan_spec.get("layer") or {}).get("revision") != head):
        return f"run {artifact.get('run')} is not pull request {name}'s plan of layer {layer_name} at {head[:12]}"
    status = plan_run.get("status") or {}
    attempts = status.get("attempts") or []
    last = attempts[-1] if attempts else {}
    if status.get("state") != "Succeeded" or last.get("number") != artifact.get("attempt"):
        return f"run {artifact.get('run')} attempt {artifact.get('attempt')} is not its last successful attempt"
    if not artifact.get("sum") or last.get("planSum") != artifact.get("sum"):
        return (f"the plan sum {artifact.get('sum')} is not the one recorded for run {artifact.get('run')} "
                f"({last.get('planSum') or 'none'})")
    return None


def release_due(state: str, layer: Mapping[str, Any], merged_at: datetime | None, now: datetime) -> bool:
    """Whether a merged or closed pull request releases `layer` now. Closed: at once. Merged: once the layer's
    branch commit has moved past the one recorded when the lock was taken (the repository fetched the merge: a
    plan of the branch from before it, which would undo the applied change, is never what the layer applies next),
    or `MERGE_RELEASE_WAIT` after the controllers recorded the merge (`status.merged.at`)."""
    if state == "closed":
        return True
    if state != "merged":
        return False
    annotations = (layer.get("metadata") or {}).get("annotations") or {}
    locked_at = annotations.get(ann.PULL_REQUEST_LOCK_BRANCH)
    if locked_at and annotations.get(ann.BRANCH_COMMIT) not in (None, "", locked_at):
        return True
    return merged_at is not None and now - merged_at >= MERGE_RELEASE_WAIT


class ReleasePlan(NamedTuple):
    """What a reconcile does with the layers a merged or closed pull request holds (`release_plan`)."""

    release: tuple[str, ...]  # "<namespace>/<name>" of the layers to release now
    notice: tuple[str, ...]  # status.releaseNotice after this round: the layers the closed notice is still to name
    recorded_first: bool  # the notice's layers are written down this round, and released at the next (at once)


def release_plan(state: str, due: Sequence[str], pending: Sequence[str]) -> ReleasePlan:
    """Merged: release what is due; there is no notice. Closed: the notice that what it applied is still live is
    written down (`status.releaseNotice`) before its layers are released, so that a notice the provider refuses
    (or a controller stopping between the two) is posted at a later round rather than lost with the lock: first
    the names are recorded and nothing released, then the layers are released while the notice stays pending
    until it is posted. Open again: nothing is released and a pending notice is dropped. Pure."""
    if state != "closed":
        return ReleasePlan(tuple(due) if state == "merged" else (), (), False)
    unrecorded = [key for key in due if key not in pending]
    if unrecorded:
        return ReleasePlan((), tuple(sorted({*pending, *due})), True)
    return ReleasePlan(tuple(due), tuple(pending), False)
