"""Retention (issue 6, item 4): delete the artifacts nothing references any more, on a schedule.

Kept, per layer: every run the layer lists (`status.latestRuns`, trimmed by the layer controller to
`runHistoryPolicy`), its last run, the plans named by the `plan-run` annotation, `status.lastPlan.run` and
`status.pendingPlan.run`, and the apply named by the `apply-run` annotation and `status.outputsSync.run` (its
outputs.json is what the outputs Secret is rebuilt from, however many runs came after); every run that still
exists as a TerraformRun, and the plan an apply run applies.
Kept, per repository: the revision index entries of every revision a layer, a run or the repository's
status still names, and every tree such a kept entry points to.

Safety, beyond the references themselves:
- storage is listed *before* the cluster is read, so any artifact seen was written before the snapshot
  that must reference it (a runner uploads only once its run exists);
- a key is deleted only once it has been unreferenced for `grace` (the state carried between passes),
  which covers sources uploaded just before their layer is annotated, and clocks or watches that lag;
- keys of a shape retention does not know, and index entries it cannot read, are never deleted, and a
  failed cluster read skips the whole pass rather than deleting on partial information.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from croniter import croniter

from burrito_py.api import annotations as ann
from burrito_py.datastore.kubeapi import KubeApiError, list_custom
from burrito_py.datastore.read_cache import innermost
from burrito_py.datastore.s3 import S3Storage
from burrito_py.datastore.storage import Storage

log = logging.getLogger(__name__)
Body = Mapping[str, Any]
RunKey = tuple[str, str, str]  # namespace, layer, run
RevisionKey = tuple[str, str, str]  # namespace, repository, revision
TREE_SUFFIX = ".tar.gz"
_COMMIT_ANNOTATIONS = (ann.BRANCH_COMMIT, ann.RELEVANT_COMMIT, ann.PLAN_COMMIT, ann.APPLY_COMMIT)


@dataclass(frozen=True)
class References:
    runs: frozenset[RunKey]
    revisions: frozenset[RevisionKey]


@dataclass(frozen=True)
class Sweep:
    delete: list[str]
    # Keys found unreferenced, with when they were first found so; carried into the next pass.
    unreferenced_since: dict[str, datetime] = field(default_factory=dict)


def _run_name(reference: object) -> str | None:
    """`<run>/<attempt>` (or a bare run name) → the run."""
    if not isinstance(reference, str) or not reference:
        return None
    return reference.split("/", 1)[0] or None


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def collect_references(layers: Iterable[Body], runs: Iterable[Body], repositories: Iterable[Body]) -> References:
    """What the cluster still points at (pure: the objects as the API returns them)."""
    kept_runs: set[RunKey] = set()
    revisions: set[RevisionKey] = set()
    repo_of: dict[tuple[str, str], tuple[str, str]] = {}
    for layer in layers:
        meta, spec, status = _mapping(layer.get("metadata")), _mapping(layer.get("spec")), _mapping(layer.get("status"))
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        annotations = _mapping(meta.get("annotations"))
        repository = _mapping(spec.get("repository"))
        repo = (str(repository.get("namespace") or ns), str(repository.get("name", "")))
        repo_of[(ns, name)] = repo
        listed = [_mapping(r) for r in status.get("latestRuns") or []] + [_mapping(status.get("lastRun"))]
        names = [r.get("name") for r in listed]
        names += [
            _run_name(annotations.get(ann.PLAN_RUN)),
            _run_name(_mapping(status.get("lastPlan")).get("run")),
            _run_name(_mapping(status.get("pendingPlan")).get("run")),
            _run_name(annotations.get(ann.APPLY_RUN)),
            _run_name(_mapping(status.get("outputsSync")).get("run")),
        ]
        kept_runs.update((ns, name, run) for run in names if isinstance(run, str) and run)
        commits = [annotations.get(k) for k in _COMMIT_ANNOTATIONS]
        commits += [r.get("revision") for r in listed] + [_mapping(status.get("lastPlan")).get("revision")]
        revisions.update((*repo, c) for c in commits if isinstance(c, str) and c)
    for run in runs:
        meta, spec = _mapping(run.get("metadata")), _mapping(run.get("spec"))
        target = _mapping(spec.get("layer"))
        ns = str(target.get("namespace") or meta.get("namespace", ""))
        layer_name = str(target.get("name", ""))
        kept_runs.add((ns, layer_name, str(meta.get("name", ""))))
        applied = _run_name(_mapping(spec.get("artifact")).get("run"))
        if applied:
            kept_runs.add((ns, layer_name, applied))
        revision = target.get("revision")
        if isinstance(revision, str) and revision and (ns, layer_name) in repo_of:
            revisions.add((*repo_of[(ns, layer_name)], revision))
    for repository in repositories:
        meta = _mapping(repository.get("metadata"))
        for branch in _mapping(repository.get("status")).get("branches") or []:
            latest = _mapping(branch).get("latestRev")
            if isinstance(latest, str) and latest:
                revisions.add((str(meta.get("namespace", "")), str(meta.get("name", "")), latest))
    return References(frozenset(kept_runs), frozenset(revisions))


def is_index_key(key: str) -> bool:
    parts = key.split("/")
    return len(parts) == 5 and parts[0] == "sources" and parts[3] == "revisions"


def plan_sweep(
    keys: Iterable[str],
    index: Mapping[str, str],
    references: References,
    unreferenced_since: Mapping[str, datetime],
    now: datetime,
    grace: timedelta,
) -> Sweep:
    """Which keys to delete now. `index` maps each readable revision index key to its tree id."""
    keys = sorted(set(keys))
    since = dict(unreferenced_since)
    delete: list[str] = []
    pending: dict[str, datetime] = {}

    def unreferenced(key: str) -> bool:
        """Record `key` as unreferenced; True when it has been so for the whole grace period."""
        first = since.get(key, now)
        if now - first >= grace:
            delete.append(key)
            return True
        pending[key] = first
        return False

    surviving_trees: set[tuple[str, str, str]] = set()
    unknown: set[tuple[str, str]] = set()  # repositories with an index entry that could not be read
    for key in keys:
        parts = key.split("/")
        if len(parts) == 6 and parts[0] == "layers":
            if (parts[1], parts[2], parts[3]) not in references.runs:
                unreferenced(key)
        elif is_index_key(key):
            repo, tree = (parts[1], parts[2]), index.get(key)
            if tree is None:
                unknown.add(repo)
            elif (*repo, parts[4]) in references.revisions or not unreferenced(key):
                surviving_trees.add((*repo, tree))
    for key in keys:  # trees last: only an entry that survives this pass keeps its tree
        parts = key.split("/")
        if len(parts) == 4 and parts[0] == "sources" and parts[3].endswith(TREE_SUFFIX):
            repo, tree = (parts[1], parts[2]), parts[3][: -len(TREE_SUFFIX)]
            if (*repo, tree) not in surviving_trees and repo not in unknown:
                unreferenced(key)
    return Sweep(delete, pending)


async def read_index(storage: Storage, keys: Iterable[str]) -> dict[str, str]:
    """Tree id of each revision index entry that can be read (an unreadable one protects its repository)."""
    index: dict[str, str] = {}
    for key in keys:
        if not is_index_key(key):
            continue
        try:
            stream = await storage.open(key)
            if stream is None:
                continue
            tree = b"".join([chunk async for chunk in stream]).decode().strip()
        except Exception as exc:  # e.g. a key no longer configured: keep, and say why
            log.warning("retention: cannot read %s (%s); keeping that repository's sources", key, exc)
            continue
        if tree:
            index[key] = tree
    return index


@dataclass
class Retention:
    """One datastore's retention state: the grace bookkeeping carried between passes."""

    storage: Storage
    api: Any  # kubernetes_asyncio ApiClient
    grace: timedelta
    unreferenced_since: dict[str, datetime] = field(default_factory=dict)

    async def sweep(self, now: datetime) -> list[str]:
        """One pass; returns the deleted keys. Storage first, then the cluster (see the module doc)."""
        keys = await self.storage.list("layers") + await self.storage.list("sources")
        index = await read_index(self.storage, keys)
        try:
            layers = await list_custom(self.api, "terraformlayers")
            runs = await list_custom(self.api, "terraformruns")
            repositories = await list_custom(self.api, "terraformrepositories")
        except KubeApiError as exc:
            log.warning("retention: pass skipped, the cluster could not be read: %s", exc)
            return []
        sweep = plan_sweep(keys, index, collect_references(layers, runs, repositories), self.unreferenced_since,
                           now, self.grace)
        self.unreferenced_since = sweep.unreferenced_since
        deleted = []
        for key in sweep.delete:
            try:
                await self.storage.delete(key)
                deleted.append(key)
            except Exception as exc:  # the next pass retries
                log.warning("retention: could not delete %s: %s", key, exc)
        inner = innermost(self.storage)  # beneath the read cache and encryption
        if isinstance(inner, S3Storage):
            await inner.abort_stale_uploads(max(self.grace, timedelta(hours=1)), now)
        log.info("retention: deleted %d objects, %d awaiting their grace period", len(deleted),
                 len(self.unreferenced_since))
        return deleted


def _utcnow() -> datetime:
    return datetime.now(UTC)


async def retention_loop(retention: Retention, schedule: str, clock: Callable[[], datetime] = _utcnow) -> None:
    """Sweep at every time the cron `schedule` names (a sixth field counts seconds), until cancelled."""
    times = croniter(schedule, clock())
    while True:
        due: datetime = times.get_next(datetime)
        await asyncio.sleep(max(0.0, (due - clock()).total_seconds()))
        try:
            await retention.sweep(clock())
        except Exception:  # one failed pass must not end retention; the next one retries
            log.exception("retention: pass failed")
