"""Whether a layer's upstreams (`spec.dependsOn`) let it plan and apply, and what it reads from them (pure;
docs/architecture.md §5.11).

The apply rule: a dependent applies only when every upstream
- exists, in its own namespace or one the controllers allow (`allowCrossNamespaceDependencies`),
- is not being deleted,
- is `Idle` with its latest code planned and applied (`status.appliedRevision`, set only then, so no pending
  plan, no live run, no failed run): a planned-only upstream never satisfies it,
- when both follow the same repository and branch, has applied the commit the dependent follows (both
  layers' branch-commit come from the same branch head, which is at least as new as the dependent's plan),
- and, when the dependent reads its outputs (`inputs`), has every consumed output in its last apply's outputs.

A dependent may plan earlier (a new commit, a drift check) with the last known upstream outputs: its condition
then says `UpstreamPending`, and the apply waits. It does not plan without known outputs: there is no
placeholder value, so none can ever reach an apply. A cycle, a missing upstream or a refused namespace stop
every run of the layer (`DependencyCycle`, `DependencyNotFound`, `CrossNamespaceDenied`), quietly: the
index wakes the layer when that changes.

The digest of the consumed outputs (`inputs_digest`) keys the plan: the runner is given exactly those values,
the plan run is stamped with the digest, and a plan whose digest differs from the current one is not the
plan of the current inputs, so the layer plans again: once per change of a consumed output. With
`triggerAlways` the upstream's apply itself is part of the digest, so every apply of it plans again.
The digest is salted with the dependent's uid and never holds a value.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from burrito_py.api.dependencies import Dependency, Key
from burrito_py.kube.conditions import Cond

SATISFIED = "Satisfied"
PENDING = "UpstreamPending"
FAILED = "UpstreamFailed"
DELETING = "UpstreamDeleting"
NOT_FOUND = "DependencyNotFound"
CYCLE = "DependencyCycle"
DENIED = "CrossNamespaceDenied"
OUTPUT_MISSING = "OutputMissing"
# A Terragrunt unit's own problems (git/terragrunt.py): a path leading out of the repository, a file that does
# not parse or a config_path not evaluated; a config_path to no unit is NOT_FOUND.
OUTSIDE = "PathOutsideRepository"
INVALID = "TerragruntConfigInvalid"
CONDITION = "DependenciesSatisfied"
# Reasons that stop every run of the dependent, plans included.
BLOCKING = (CYCLE, NOT_FOUND, DENIED, OUTSIDE, INVALID)
# In the order a layer's condition reports them: the first reason found among its upstreams wins.
PRECEDENCE = (OUTSIDE, CYCLE, INVALID, DENIED, NOT_FOUND, FAILED, OUTPUT_MISSING, DELETING, PENDING)


@dataclass(frozen=True, slots=True)
class UpstreamView:
    """What the apply rule reads of an upstream (from the inventory; outputs from the controllers' cache)."""

    key: Key
    deleting: bool = False
    state: str | None = None
    applied_revision: str | None = None  # status.appliedRevision
    same_source: bool = False  # same repository and branch as the dependent
    # Its own dependencies failed (its DependenciesSatisfied reason is UpstreamFailed): the failure spreads.
    upstream_failed: bool = False
    apply_run: str | None = None  # `<run>/<attempt>` of its last apply (whose outputs are read)
    # Output name → a fingerprint of its value (sha256 of its JSON), of `apply_run`'s outputs; None: not known.
    outputs: Mapping[str, str] | None = None
    outputs_problem: str | None = None  # why `outputs` cannot be read now (shown on the dependent)


@dataclass(frozen=True, slots=True)
class DependencySnapshot:
    dependent: Key
    branch_commit: str | None
    dependencies: tuple[Dependency, ...]
    upstreams: Mapping[Key, UpstreamView]  # the upstreams that exist
    cycle: tuple[Key, ...] | None = None  # a cycle through the dependent (dependency_graph.find_cycle)
    cross_namespace_allowed: bool = False
    salt: str = ""  # the dependent's uid
    # (reason, message) of the layer's Terragrunt unit (its repository controller annotation): they block it.
    problems: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class UpstreamStanding:
    """One row of `status.dependencies`."""

    upstream: Key
    state: str | None
    applied_revision: str | None
    satisfied: bool
    reason: str
    message: str = ""

    def to_status(self) -> dict[str, Any]:
        # `message` always: the CRD defaults it to "", and a status that differs from what the API stores would be
        # written again at every reconcile.
        row: dict[str, Any] = {"name": "/".join(self.upstream), "satisfied": self.satisfied, "reason": self.reason,
                               "message": self.message}
        if self.state is not None:
            row["state"] = self.state
        if self.applied_revision is not None:
            row["appliedRevision"] = self.applied_revision
        return row


@dataclass(frozen=True, slots=True)
class DependencyVerdict:
    standings: tuple[UpstreamStanding, ...]
    condition: Cond
    plan_allowed: bool
    apply_allowed: bool
    # The digest of what the layer reads from its upstreams (None: it reads nothing, and no plan is keyed).
    inputs_digest: str | None = None
    # Variable → (upstream, output), for the executor to hand the runner the values (never in status).
    inputs: tuple[tuple[str, Key, str], ...] = field(default=())
    # The upstream applies whose outputs the digest is of: the values handed over must come from these.
    consumed: tuple[tuple[Key, str | None], ...] = field(default=())


def holding_dependents(upstream: Key, dependents: tuple[Key, ...], cross_namespace_allowed: bool) -> tuple[Key, ...]:
    """The dependents a destroy of `upstream` waits for: only those whose dependency is allowed. A layer of
    another namespace, while `allowCrossNamespaceDependencies` is off, is refused as a dependent
    (`CrossNamespaceDenied`): it must not hold, nor be named in, another team's destroy either."""
    if cross_namespace_allowed:
        return dependents
    return tuple(key for key in dependents if key[0] == upstream[0])


def _fmt(key: Key) -> str:
    return "/".join(key)


def _standing(snap: DependencySnapshot, dep: Dependency) -> UpstreamStanding:
    key = dep.upstream
    if snap.cycle is not None:
        return UpstreamStanding(key, None, None, False, CYCLE, "cycle: " + " -> ".join(map(_fmt, snap.cycle)))
    if key[0] != snap.dependent[0] and not snap.cross_namespace_allowed:
        return UpstreamStanding(key, None, None, False, DENIED,
                                f"{_fmt(key)} is in another namespace, and allowCrossNamespaceDependencies is off")
    up = snap.upstreams.get(key)
    if up is None:
        return UpstreamStanding(key, None, None, False, NOT_FOUND, f"layer {_fmt(key)} does not exist (yet)")
    facts = (key, up.state, up.applied_revision)
    if up.deleting:
        return UpstreamStanding(*facts, False, DELETING, f"{_fmt(key)} is being deleted")
    if up.state == "MaxRetriesReached" or up.upstream_failed:
        why = "its own upstream failed" if up.upstream_failed else "its last run failed after its retries"
        return UpstreamStanding(*facts, False, FAILED, f"{_fmt(key)} cannot apply: {why}")
    missing = _missing_outputs(dep, up)
    if missing:
        return UpstreamStanding(*facts, False, OUTPUT_MISSING,
                                f"{_fmt(key)}'s last apply has no output {', '.join(missing)}")
    if up.state != "Idle" or up.applied_revision is None:
        return UpstreamStanding(*facts, False, PENDING,
                                f"{_fmt(key)} is {up.state or 'not evaluated yet'}: waiting for it to apply")
    if up.same_source and up.applied_revision != snap.branch_commit:
        return UpstreamStanding(*facts, False, PENDING, f"{_fmt(key)} has applied {up.applied_revision}, and this "
                                f"layer follows {snap.branch_commit}: waiting for it to apply that commit")
    if dep.reads_outputs and up.outputs is None:
        why = f": {up.outputs_problem}" if up.outputs_problem else ""
        return UpstreamStanding(*facts, False, PENDING, f"the outputs of {_fmt(key)} are not read yet{why}")
    return UpstreamStanding(*facts, True, SATISFIED)


def _missing_outputs(dep: Dependency, up: UpstreamView) -> list[str]:
    if up.outputs is None:
        return []
    return sorted({output for output in (*(o for _, o in dep.inputs), *dep.watched) if output not in up.outputs})


def _digest(snap: DependencySnapshot) -> tuple[str | None, bool]:
    """(the inputs digest, whether every consumed value is known)."""
    parts: list[Any] = []
    known = True
    for dep in snap.dependencies:
        up = snap.upstreams.get(dep.upstream)
        if dep.trigger_always:
            parts.append(["apply", _fmt(dep.upstream), up.apply_run if up is not None else None])
        for variable, output in dep.inputs:
            value = (up.outputs or {}).get(output) if up is not None else None
            known = known and value is not None
            parts.append(["input", variable, _fmt(dep.upstream), output, value])
        for output in dep.watched:  # read by Terragrunt itself: they key the plan, no variable is set
            value = (up.outputs or {}).get(output) if up is not None else None
            known = known and value is not None
            parts.append(["watch", _fmt(dep.upstream), output, value])
        if dep.watch_all:
            outputs = up.outputs if up is not None else None
            known = known and outputs is not None
            parts.append(["watch-all", _fmt(dep.upstream), sorted((outputs or {}).items())])
    if not parts:
        return None, True
    blob = json.dumps([snap.salt, parts], separators=(",", ":"), sort_keys=True)
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest(), known


def judge_dependencies(snap: DependencySnapshot) -> DependencyVerdict | None:
    """None for a layer without dependencies (nothing changes for it)."""
    if not snap.dependencies and not snap.problems:
        return None
    standings = tuple(_standing(snap, dep) for dep in snap.dependencies)
    digest, known = _digest(snap)
    reasons = {s.reason for s in standings} | {reason for reason, _ in snap.problems}
    blocked = bool(reasons & set(BLOCKING))
    worst = next((r for r in PRECEDENCE if r in reasons), SATISFIED)
    if worst == SATISFIED:
        condition = Cond(CONDITION, True, SATISFIED, f"{len(standings)} upstream(s) applied")
    else:
        # The unit's own problem first (it names the file and the block): an upstream's standing otherwise.
        message = next((m for r, m in snap.problems if r == worst), None)
        if message is None:
            message = next(s for s in standings if s.reason == worst).message
        condition = Cond(CONDITION, False, worst, message)
    inputs = tuple((variable, dep.upstream, output) for dep in snap.dependencies for variable, output in dep.inputs)
    consumed = tuple((dep.upstream, up.apply_run if (up := snap.upstreams.get(dep.upstream)) else None)
                     for dep in snap.dependencies if dep.inputs)
    return DependencyVerdict(
        standings=standings,
        condition=condition,
        plan_allowed=not blocked and known,
        apply_allowed=worst == SATISFIED and known,
        inputs_digest=digest if known else None,
        inputs=inputs,
        consumed=consumed,
    )


