"""What a TerraformPullRequest needs now (pure; docs/architecture.md §11.3): which plan-only runs to create and to
discard, its status, and the results its comment and commit statuses are rendered from.

One plan-only run per affected layer and head, with a deterministic name (`run_name`), so a retried create never
makes a second run and a new head's runs never meet the old head's: those are discarded (their artifacts, then
the run). A closed or merged pull request discards them all. Downstream layers are listed, never planned.

A fork's pull request whose head may not be planned (`pullrequests.forks.fork_gate`: the repository plans no
fork, or no approver approved this head) gets no run, loses any it had (an approval withdrawn, or a push after
it), and says why: its state, the `Planned` condition, the comment and the aggregate commit status.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from burrito_py.controllers.layer.inputs_record import Sources, Upstream, build_record
from burrito_py.gitproviders.client import ReviewFacts
from burrito_py.plans.masking import SecretValues
from burrito_py.plans.model import PlanModel
from burrito_py.pullrequests.affected import Affected
from burrito_py.pullrequests.comment import LayerResult, PullRequestResults
from burrito_py.pullrequests.credentials import TokenSource
from burrito_py.pullrequests.forks import Gate

__all__ = [
    "PlanOutcome",
    "PullRequestDecision",
    "PullRequestMemory",
    "PullRequestSnapshot",
    "RunFacts",
    "decide_pull_request",
    "merged_review",
    "pull_request_record",
    "run_name",
]

Key = tuple[str, str]
Body = dict[str, Any]
_TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class RunFacts:
    """One of the pull request's runs, as the decision needs it."""

    name: str
    layer: Key
    state: str | None  # the run's status.state
    message: str = ""  # why it failed (its HasSucceeded message)
    uid: str = ""
    attempt: int = 0  # its latest attempt (0: none yet)
    # Its plan JSON's sum and size as the run controller recorded them from the datastore (never parsed above the
    # controllers' limit, and only with that sum).
    json_sum: str | None = None
    json_size: int | None = None
    plan_sum: str | None = None  # its latest attempt's binary plan sum, as the run controller recorded it
    action: str = "plan"  # an apply: `/burrito-py apply` (apply before merge)
    artifact_run: str | None = None  # an apply's plan run
    revision: str | None = None  # spec.layer.revision
    secret_variables: tuple[str, ...] = ()  # fed from a Secret through its pods' environment: masked in the comment


def _kept(runs: Sequence[RunFacts], head: str | None) -> set[str]:
    """The runs never discarded: each apply before merge (the record of what was applied; one that never started
    and names another head than the current one is dropped), and the plan a live one is applying."""
    kept: set[str] = set()
    for run in runs:
        if run.action != "apply":
            continue
        if run.attempt == 0 and run.state not in _TERMINAL and head is not None and run.revision != head:
            continue
        kept.add(run.name)
        if run.state not in _TERMINAL and run.artifact_run:
            kept.add(run.artifact_run)
    return kept


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    """What a finished run's artifacts say (read once from the datastore)."""

    state: Literal["planned", "failed"]
    summary: str
    plan: PlanModel | None = None
    plan_text: str = ""
    log_tail: tuple[str, ...] = ()
    verdict: str | None = None  # the plan policies' verdict, when policies select the layer
    hide: SecretValues = field(default_factory=SecretValues)  # what the comment masks (Secret-fed values)
    # What the plan would change (plans/changes.py), computed by the controllers from the verified plan JSON.
    changes_digest: str | None = None


@dataclass
class PullRequestMemory:
    """What the pull request controller keeps between reconciles: finished runs' outcomes (read once; keyed by run
    uid) and the provider token sources (a GitHub App token is exchanged once, not per update)."""

    outcomes: dict[str, PlanOutcome] = field(default_factory=dict)
    tokens: dict[tuple[str, ...], TokenSource] = field(default_factory=dict)
    # The layer controller's comparisons of a layer's inputs between a commit and a merged head (merged_reviews.py).
    trees: dict[tuple[str, ...], tuple[bool, bool]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PullRequestSnapshot:
    name: str
    namespace: str
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    layers: Mapping[Key, str]  # the layers that exist now → their path
    runs: Sequence[RunFacts]  # every run labelled with this pull request
    outcomes: Mapping[str, PlanOutcome] = field(default_factory=dict)  # run name → outcome, for finished runs
    affected: Affected | None = None  # found at spec.headSha, when status.headSha is another head
    gate: Gate | None = None  # why the head may not be planned (a fork's), else None
    # Layers a `/burrito-py plan` comment asks to plan again now → the comment's id (part of the new run's name).
    replan: Mapping[Key, str] = field(default_factory=dict)
    # Once merged: when the controllers saw it, the provider's review facts (asked only when an apply requirement
    # needs them) and each layer's verdict on its branch plan (its status.reviewedPlan naming this pull request).
    now: str = ""
    review: ReviewFacts | None = None
    verdicts: Mapping[Key, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PullRequestDecision:
    status: Body  # state, headSha, progress, layers (the executor adds comment, statuses and conditions)
    create: tuple[tuple[Key, str], ...] = ()  # (layer, run name) at spec.headSha
    discard: tuple[RunFacts, ...] = ()  # artifacts first, then the run
    results: PullRequestResults | None = None  # what the comment and statuses say; None once closed
    needs_affected: bool = False  # the head moved: find its affected layers, then decide again
    gate: Gate | None = None  # the head is not planned: why (the Planned condition says it)
    needs_review: bool = False  # merged, and an apply requirement needs the provider's review facts: ask, decide again
    tell: tuple[tuple[Key, str], ...] = ()  # merged: a layer's verdict to say on the pull request (layer, text)
    wake_layers: tuple[Key, ...] = ()  # the merge was just recorded: the layers it changed decide again


def pull_request_record(upstream: Upstream | None) -> dict[str, Any]:
    """The inputs record of a pull request's plan that inherits no secret: no varsFrom value, and of the upstream
    outputs only those not marked sensitive (a missing variable fails the plan visibly, naming it)."""
    upstream = upstream or Upstream()
    hidden = set(upstream.sensitive)
    kept = Upstream(upstream.digest, {k: v for k, v in upstream.variables.items() if k not in hidden}, ())
    return build_record(Sources(), kept)


def run_name(pull_request: str, layer: Key, head: str, number: int, replan: str | None = None) -> str:
    """`pr<n>-<layer>-<hash>`: the same pull request, layer and head (and `/burrito-py plan` comment, when one asked
    for it) always name the same run."""
    digest = hashlib.sha256("\x00".join((pull_request, *layer, head, *([replan] if replan else []))).encode()
                            ).hexdigest()[:10]
    return f"pr{number}-{layer[1][:30].rstrip('-.')}-{digest}"


def _rows(snap: PullRequestSnapshot, head: str) -> list[Body]:
    """The layer rows for `head`: those already found for it, else those `affected` found."""
    if snap.status.get("headSha") == head:
        return [dict(row) for row in snap.status.get("layers") or ()]
    assert snap.affected is not None
    rows: list[Body] = [{"namespace": ns, "name": name, "path": snap.layers.get((ns, name), ""), "state": "pending"}
                        for ns, name in snap.affected.layers]
    rows += [{"namespace": ns, "name": name, "path": snap.layers.get((ns, name), ""), "downstream": True,
              "state": "pending"} for ns, name in snap.affected.downstream]
    return rows


def _result(row: Mapping[str, Any], outcome: PlanOutcome | None) -> LayerResult:
    state = row.get("state", "pending")
    return LayerResult(
        row["namespace"], row["name"], row.get("path", ""), state,
        plan=outcome.plan if outcome else None, plan_text=outcome.plan_text if outcome else "",
        log_tail=outcome.log_tail if outcome else (), verdict=outcome.verdict if outcome else None,
        downstream=bool(row.get("downstream")), hide=outcome.hide if outcome else SecretValues(),
        plan_sum=str(row.get("planSum") or ""),
    )


def _required(settings: Mapping[str, Any] | None) -> list[str]:
    wanted = ((settings or {}).get("commands") or {}).get("applyRequirements") or ()
    return [r for r in ("approved", "mergeable", "undiverged") if r in wanted]


def merged_review(spec: Mapping[str, Any], status: Mapping[str, Any], settings: Mapping[str, Any] | None,
                  review: ReviewFacts | None, now: str) -> Body | None:
    """What a merge reviewed (§11.3, "After merge"), recorded once; None: the provider's review facts are needed
    first (an `approved` apply requirement). Reviewed means: the pull request is not a fork's, the merged head is
    the head its layers were planned at (a push after the plan is not reviewed), and the apply requirements held:
    `approved` as the provider says now (reviews outlive the merge), `mergeable` by the merge itself (the host
    merged it), `undiverged` per layer, by the layer controller's tree comparison (the merged files the layer
    reads are the head's: the base did not move under it). Each layer planned successfully at that head keeps the
    changes digest of its plan; the others are listed without one (their branch plan waits, and says so)."""
    head = str(spec.get("headSha") or "")
    rows = [r for r in status.get("layers") or () if not r.get("downstream")]
    planned_at = status.get("headSha")
    reason = ""
    if spec.get("fromFork"):
        reason = "a fork's pull request: its plans never approve an apply of the branch"
    elif not planned_at:
        reason = f"the merged head {head[:12]} was never planned"
    elif planned_at != head:
        reason = (f"the merged head {head[:12]} is not the head planned and shown ({str(planned_at)[:12]}): "
                  "a push after the plan")
    else:
        required = _required(settings)
        if "approved" in required:
            if review is None:
                return None
            if not [u for u in review.approved_by if u and u != review.author]:
                reason = "apply requirement approved: no reviewer other than the author approved it"
    layers: list[Body] = []
    for row in rows:
        entry: Body = {"namespace": row["namespace"], "name": row["name"]}
        if not reason and row.get("state") == "planned" and row.get("changesDigest"):
            entry["changesDigest"] = row["changesDigest"]
        layers.append(entry)
    return {"headSha": head or None, "at": now, "reason": reason, "layers": layers}


def _merged(snap: PullRequestSnapshot, settings: Mapping[str, Any] | None) -> PullRequestDecision:
    spec, status = snap.spec, snap.status
    held = status.get("merged")
    record = dict(held) if held else merged_review(spec, status, settings, snap.review, snap.now)
    if record is None:
        return PullRequestDecision(dict(status), needs_review=True)
    tell: list[tuple[Key, str]] = []
    layers: list[Body] = []
    for entry in record.get("layers") or ():
        entry = dict(entry)
        key = (str(entry["namespace"]), str(entry["name"]))
        verdict = snap.verdicts.get(key) or {}
        told = f"{verdict.get('result')}:{verdict.get('planSum')}"
        if verdict and verdict.get("headSha") == record.get("headSha") and entry.get("told") != told:
            tell.append((key, f"burrito-py: after the merge, layer `{key[0]}/{key[1]}`: {verdict.get('message')}"))
            entry["told"] = told
        layers.append(entry)
    record["layers"] = layers
    # headSha unset: a reopen finds the head's layers again.
    merged: Body = {"state": "Merged", "headSha": None, "gatedSha": None, "progress": None, "layers": [],
                    "merged": record}
    kept = _kept(snap.runs, None)
    return PullRequestDecision(merged, discard=tuple(r for r in snap.runs if r.name not in kept), tell=tuple(tell),
                               wake_layers=() if held else tuple((str(e["namespace"]), str(e["name"]))
                                                                  for e in layers))


def decide_pull_request(snap: PullRequestSnapshot, settings: Mapping[str, Any] | None = None) -> PullRequestDecision:
    """`settings`: the repository's spec.pullRequests (its apply requirements count once merged)."""
    spec, status = snap.spec, snap.status
    if spec.get("state") == "merged":
        return _merged(snap, settings)
    if spec.get("state") == "closed":
        # headSha unset: a reopen finds the head's layers again. Closed without a merge: nothing was reviewed.
        closed: Body = {"state": "Closed", "headSha": None, "gatedSha": None, "progress": None, "layers": [],
                        "merged": None}
        kept = _kept(snap.runs, None)
        return PullRequestDecision(closed, discard=tuple(r for r in snap.runs if r.name not in kept))
    head = str(spec["headSha"])
    number = int(spec["number"])
    repository = f"{snap.namespace}/{spec['repository']}"
    if snap.gate is not None:
        # Not fetched, not planned: headSha unset, so an approval finds the head's layers then.
        gated: Body = {"state": snap.gate.state, "headSha": None, "gatedSha": head, "progress": None, "layers": []}
        return PullRequestDecision(gated, discard=tuple(snap.runs), gate=snap.gate, results=PullRequestResults(
            repository, number, head, notice=snap.gate.message, notice_short=snap.gate.short))
    if status.get("headSha") != head and snap.affected is None:
        return PullRequestDecision(dict(status), needs_affected=True)
    runs = {run.name: run for run in snap.runs}
    wanted: set[str] = _kept(snap.runs, head)
    applies = {run.layer: run.name for run in snap.runs if run.name in wanted and run.action == "apply"}
    create: list[tuple[Key, str]] = []
    rows: list[Body] = []
    results: list[LayerResult] = []
    for row in _rows(snap, head):
        key = (row["namespace"], row["name"])
        if key not in snap.layers:
            continue  # the layer is gone: nothing to plan or show
        if row.get("downstream"):
            rows.append({**row, "state": "pending", "summary": ""})
            results.append(_result(rows[-1], None))
            continue
        replan = snap.replan.get(key) or row.get("replan")
        name = run_name(snap.name, key, head, number, replan)
        if replan:
            row["replan"] = replan
        wanted.add(name)
        run = runs.get(name)
        outcome = snap.outcomes.get(name)
        if run is None:
            create.append((key, name))
            state, summary = "planning", ""
        elif run.state in _TERMINAL and outcome is not None:
            state, summary = outcome.state, outcome.summary
        elif run.state == "Failed":  # its log is not read yet: the failure is known, its tail will follow
            state, summary = "failed", run.message
        else:
            state, summary = "planning", ""
        shown = state == "planned" and run is not None and run.plan_sum is not None and run.attempt > 0
        rows.append({**{k: v for k, v in row.items() if k not in ("changesDigest", "planSum", "planAttempt",
                                                                  "applyRun")},
                     "run": name, "state": state, "summary": summary,
                     **({"changesDigest": outcome.changes_digest}
                        if state == "planned" and outcome is not None and outcome.changes_digest else {}),
                     **({"planSum": run.plan_sum, "planAttempt": run.attempt} if shown and run is not None else {}),
                     **({"applyRun": applies[key]} if key in applies else {})})
        results.append(_result(rows[-1], outcome if state in ("planned", "failed") else None))
    own = [row for row in rows if not row.get("downstream")]
    done = sum(1 for row in own if row["state"] in ("planned", "failed"))
    denied = any(result.verdict == "Denied" for result in results)
    if done < len(own):
        state = "Planning"
    elif denied or any(row["state"] == "failed" for row in own):
        state = "Failed"
    else:
        state = "Planned"
    new_status: Body = {"state": state, "headSha": head, "gatedSha": None, "progress": f"{done}/{len(own)}",
                        "layers": rows}
    discard = tuple(run for run in snap.runs if run.name not in wanted)
    return PullRequestDecision(new_status, tuple(create), discard,
                               PullRequestResults(repository, number, head, tuple(results)))
