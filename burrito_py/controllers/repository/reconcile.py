"""TerraformRepository reconcile (docs/architecture.md §8): fetch the mirror, resolve the branches its layers use,
store one source archive per tree, and tell each layer its `branch-commit` / `relevant-commit`.

Git work is blocking, so it runs in a thread; one fetch serves every layer of the repository.
Credentials come from the Secret named in `spec.repository.secretName`, read at each reconcile (so a fixed
Secret is used at the next poll) and handed to that one fetch; a missing Secret or key fails the sync with a
message naming the Secret and the key, never a value. A Secret whose `allowedHosts` does not name the URL's host
gives `HostNotAllowed`, and a destination the outbound address guard refuses `AddressNotAllowed`: in both cases
nothing is sent.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import tempfile
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from burrito_py.api import annotations as ann
from burrito_py.api.patterns import object_name_problem
from burrito_py.controllers import metrics
from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.validation import cross_namespace_problem
from burrito_py.controllers.repository.decide import read_by_layers, source_not_stored_reason, source_retry_delay
from burrito_py.controllers.repository.generated import CONDITION as GENERATED
from burrito_py.controllers.repository.generated import UNIT_ANNOTATION, decide_generated_layers
from burrito_py.controllers.repository.terragrunt import decide_terragrunt, terragrunt_enabled
from burrito_py.controllers.repository.webhook_keys import CONDITION as WEBHOOKS
from burrito_py.controllers.repository.webhook_keys import webhook_entry
from burrito_py.datastore.client import DatastoreError
from burrito_py.git.allowed_hosts import HostNotAllowed
from burrito_py.git.credentials import CredentialsError, GitCredentials, credentials_from_secret
from burrito_py.git.mirror import GitError, GitMirror, SourceRefused
from burrito_py.git.paths import Change, normalize_repo_path
from burrito_py.git.relevance import decide_layer_commits, diff_base
from burrito_py.git.terragrunt import TerragruntTree, units_of
from burrito_py.git.urls import is_file_url, url_policy_problem
from burrito_py.kube.client import KubeError, crd_path, path
from burrito_py.kube.conditions import Cond, merge_conditions
from burrito_py.kube.events import post_event
from burrito_py.kube.inventory import Body, Key, key_of
from burrito_py.outbound import OutboundPolicy, OutboundRefused
from burrito_py.pullrequests.poll import CONDITION as POLLED
from burrito_py.pullrequests.poll import polling
from burrito_py.timeutil import format_time_precise, utcnow

log = logging.getLogger(__name__)
# kubernetes_asyncio's REST client logs every response body at DEBUG, and we read Secrets with it: keep that
# logger at INFO so turning on debug logging can never print git credentials.
logging.getLogger("kubernetes_asyncio.client.rest").setLevel(logging.INFO)
_mirrors: dict[tuple[Path, str, OutboundPolicy], GitMirror] = {}


def mirror_for(cache_dir: Path, namespace: str, name: str, url: str, outbound: OutboundPolicy) -> GitMirror:
    """The repository's own mirror, `<cache>/<namespace>/<name>/<slug>-<hash(url)>.git`: never shared with a
    repository of another namespace (or another name), so no fetch, credential or failure of one can hand its
    objects to the other. Its fetches reach only what `outbound` (the controllers' address guard) allows."""
    cache_dir = cache_dir / namespace / name
    key = (cache_dir, url, outbound)
    if key not in _mirrors:
        _mirrors[key] = GitMirror(cache_dir, url, outbound=outbound)
    return _mirrors[key]


async def reconcile_repository(ctx: Context, key: Key) -> None:
    started = time.perf_counter()
    try:
        await _reconcile(ctx, key)
    except Exception:
        metrics.RECONCILE_ERRORS.labels("repository").inc()
        raise
    finally:
        metrics.RECONCILE_SECONDS.labels("repository").observe(time.perf_counter() - started)
        if ctx.inventory.repositories.get(key) is not None:  # a deleted one is not polled any more
            ctx.wake_repository(key, ctx.settings.repository_poll_interval)


def wake_layers(ctx: Context, key: Key, before: Body | None, after: Body | None) -> None:
    """The repository store's on_change: when what its layers read of it changed (a new sync outcome, a new
    spec; it came or went), wake them, whether the watch or our own status write told the inventory."""
    # Before the first listing is complete no wake is taken (Context.wake_layer), so no layer is looked for: at
    # start-up every repository arrives, and each would walk every layer.
    if ctx.primed and read_by_layers(before) != read_by_layers(after):
        for layer in ctx.inventory.layers_of_repository(*key):
            ctx.wake_layer(key_of(layer))


async def _reconcile(ctx: Context, key: Key) -> None:
    repository = ctx.inventory.repositories.get(key)
    if repository is None or repository["metadata"].get("deletionTimestamp"):
        if ctx.webhook_keys is not None:  # its webhook key goes with it
            await ctx.webhook_keys.publish(ctx.kube, ctx.inventory.repositories, key, None,
                                           Cond(WEBHOOKS, False, "Deleted"))
        return
    namespace, name = key
    webhooks = await publish_webhook_key(ctx, repository)
    source = (repository.get("spec") or {}).get("repository") or {}
    url = source.get("url", "")
    # Layers of other namespaces count only when the operator and the repository allow it (their own reconcile
    # says why not).
    layers = [
        layer
        for layer in ctx.inventory.layers_of_repository(namespace, name)
        if cross_namespace_problem(layer, ctx.settings, repository) is None
    ]
    generation = ((repository.get("spec") or {}).get("layersFromUnits") or {})
    branches = sorted({(layer.get("spec") or {}).get("branch", "") for layer in layers} - {""}
                      | ({str(generation["branch"])} if generation.get("branch") else set()))
    now = utcnow()
    refused = url_policy_problem(url, ctx.settings.allow_file_repositories)
    if refused:
        await _fail(ctx, repository, branches, "FileURLNotAllowed" if is_file_url(url) else "InvalidURL", refused, now,
                    webhooks)
        return
    try:
        credentials = await credentials_of(ctx, namespace, source.get("secretName"), url)
    except CredentialsError as exc:  # messages name the Secret and key only
        reason = "HostNotAllowed" if isinstance(exc, HostNotAllowed) else "CredentialsInvalid"
        await _fail(ctx, repository, branches, reason, str(exc), now, webhooks)
        return
    mirror = mirror_for(ctx.settings.git_cache_dir, namespace, name, url, ctx.settings.outbound_policy())
    try:
        await asyncio.to_thread(mirror.fetch, credentials)
        metrics.GIT_FETCHES.labels(f"{namespace}/{name}").inc()
    except OutboundRefused as exc:  # nothing was sent: the message names the host and the settings
        await _fail(ctx, repository, branches, "AddressNotAllowed", f"spec.repository.url: {exc}", now, webhooks)
        return
    except GitError as exc:
        # GitError messages are sanitized: no credentials
        await _fail(ctx, repository, branches, "FetchFailed", str(exc), now, webhooks)
        return

    entries = []
    units: tuple[str, ...] | None = None
    not_stored: DatastoreError | SourceRefused | None = None
    for branch in branches:
        if not_stored is not None and _not_stored_reason(not_stored) == "DatastoreUnavailable":
            # No answer: the branches left would fail alike (and each wait for it). A refusal (4xx) is the
            # archive's own, so the other branches still sync.
            entries.append(_branch_entry(branch, None, now, f"not synced: {_not_stored_message(not_stored)}"))
            continue
        head = await asyncio.to_thread(mirror.resolve, branch)
        branch_layers = [layer for layer in layers if (layer.get("spec") or {}).get("branch") == branch]
        if head is None:
            entries.append(_branch_entry(branch, None, now, f'branch "{branch}" does not exist in {mirror.safe_url}'))
            continue
        head_date = await asyncio.to_thread(mirror.commit_date, head)
        try:
            await ensure_source(ctx, mirror, namespace, name, head)
            # The Terragrunt snapshot has its own bounds (entries, time), met even by a source stored before the
            # archive's: the branch's refusal, never the whole repository's reconcile.
            if branch == generation.get("branch"):
                units = await asyncio.to_thread(_units, mirror, head, str(generation.get("path") or ""))
            patches = await asyncio.to_thread(_branch_patches, mirror, branch_layers, head, head_date, repository)
        except (DatastoreError, SourceRefused) as exc:
            not_stored = not_stored or exc
            entries.append(_branch_entry(branch, None, now, f"not synced: {_not_stored_message(exc)}"))
            continue
        for layer, patch in patches:
            await _annotate_layer(ctx, layer, patch, head)
        entries.append(_branch_entry(branch, head, now, "Synced"))
    if not_stored is not None:
        await _source_not_stored(ctx, repository, entries, not_stored, now, webhooks)
        return
    generated = await _generate_layers(ctx, repository, units)
    await _write_status(ctx, repository, "Synced", entries, Cond("Synced", True, "FetchSucceeded", ""), now,
                        webhooks, generated)


def _units(mirror: GitMirror, head: str, under: str) -> tuple[str, ...]:
    return units_of(terragrunt_tree(mirror, head), normalize_repo_path(under))


async def _generate_layers(ctx: Context, repository: Body, units: tuple[str, ...] | None) -> Cond | None:
    """Create, bring back in step and delete the layers of `spec.layersFromUnits` (generated.py); its condition."""
    namespace, name = key_of(repository)
    names = frozenset(b["metadata"]["name"] for b in ctx.inventory.layers if b["metadata"]["namespace"] == namespace)
    decision = decide_generated_layers(repository, units, ctx.inventory.layers_of_repository(namespace, name), names)
    refused: list[str] = []
    for body in decision.create:
        try:
            created = await ctx.kube.create(crd_path("terraformlayers", namespace), body)
        except KubeError as exc:
            if exc.status >= 500:
                raise
            if exc.status != 409:  # 409: created meanwhile; the next round sees it. Else: the API says why not.
                unit = body["metadata"]["annotations"][UNIT_ANNOTATION] or "."
                refused.append(f"{unit} ({body['metadata']['name']}): {exc.status} {exc.reason}: {exc.message[:300]}")
            continue
        ctx.inventory.layers.observe(created)
        log.info("repository %s/%s: created layer %s for unit %s", namespace, name, body["metadata"]["name"],
                 body["metadata"]["annotations"][UNIT_ANNOTATION] or ".")
    for layer, patch in decision.patch:
        ctx.inventory.layers.observe(await ctx.kube.merge_patch(crd_path("terraformlayers", namespace, layer), patch))
    for layer in decision.delete:
        log.info("repository %s/%s: deleting layer %s, its unit is gone", namespace, name, layer)
        await ctx.kube.delete(crd_path("terraformlayers", namespace, layer))
    if refused:
        # A condition, not an Event per reconcile: it stays until the unit or the settings change.
        return Cond(GENERATED, False, "LayerCreateRefused",
                    "the API refused the layer(s) of unit(s) " + "; ".join(refused))
    return decision.condition


async def publish_webhook_key(ctx: Context, repository: Body) -> Cond:
    """Publish (or withdraw) the repository's webhook key for the server; its `Webhooks` condition."""
    entry, condition = await webhook_entry(ctx.kube, repository)
    if ctx.webhook_keys is None:
        return condition
    return await ctx.webhook_keys.publish(ctx.kube, ctx.inventory.repositories, key_of(repository), entry, condition)


async def credentials_of(ctx: Context, namespace: str, secret_name: str | None, url: str) -> GitCredentials | None:
    """The git credentials of the repository's Secret; CredentialsError when the Secret cannot give them."""
    if not secret_name:
        return None
    problem = object_name_problem(secret_name)
    if problem is not None:  # a path in the name would reach another namespace's Secret: never read
        raise CredentialsError(f"spec.repository.secretName: {problem}")
    try:
        secret = await ctx.kube.get(path("v1", "secrets", namespace, secret_name))
    except KubeError as exc:  # e.g. 403 without RBAC on Secrets; the API's message carries no Secret data
        raise CredentialsError(f"cannot read Secret {namespace}/{secret_name}: {exc.status} {exc.reason}") from None
    if secret is None:
        raise CredentialsError(f"Secret {namespace}/{secret_name} (spec.repository.secretName) does not exist")
    return credentials_from_secret(secret, url)


async def _fail(ctx: Context, repository: Body, branches: list[str], reason: str, message: str, now: datetime,
                webhooks: Cond) -> None:
    entries = [_branch_entry(b, None, now, f"fetch failed: {message}") for b in branches]
    await _write_status(ctx, repository, "SyncNeeded", entries, Cond("Synced", False, reason, message), now,
                        webhooks)


def _not_stored_message(error: DatastoreError | SourceRefused) -> str:
    return f"the source archive cannot be stored: {error}; tried again"


def _not_stored_reason(error: DatastoreError | SourceRefused) -> str:
    # An archive the controllers refuse to make (too many files, too large, too slow) is refused as the datastore
    # refuses one too large.
    return "SourceNotStored" if isinstance(error, SourceRefused) else source_not_stored_reason(error.status_code)


async def _source_not_stored(ctx: Context, repository: Body, entries: list[Body],
                             error: DatastoreError | SourceRefused, now: datetime, webhooks: Cond) -> None:
    """Fetched, but a head's source archive cannot be stored (`error`, the first): no layer is told of a revision
    its runner could not read; the branches that did sync are (`entries`). Said on `Synced` (a kubectl user sees it,
    not only the controllers' log) and tried again soon, then less often (`source_retry_delay`). The message names
    no delay, so a retry that fails alike posts no second Event."""
    reason = _not_stored_reason(error)
    delay = source_retry_delay(ctx.inventory.repositories.get(key_of(repository)) or repository, reason, now,
                               ctx.settings.repository_poll_interval)
    await _write_status(ctx, repository, "SyncNeeded", entries,
                        Cond("Synced", False, reason, _not_stored_message(error)), now, webhooks)
    ctx.wake_repository(key_of(repository), delay)  # before the poll interval the reconcile's end asks for


def _branch_entry(branch: str, head: str | None, now: datetime, outcome: str) -> Body:
    # Sub-second: a webhook's sync request in the same second as this fetch's start must still be told
    # apart (before it: satisfied; after it: fetch again).
    entry: Body = {"name": branch, "lastSyncDate": format_time_precise(now), "lastSyncStatus": outcome}
    if head:
        entry["latestRev"] = head
    return entry


async def ensure_source(ctx: Context, mirror: GitMirror, namespace: str, name: str, revision: str) -> None:
    """Upload the revision's archive once per tree (sources are content-addressed by tree id)."""
    store = ctx.datastore
    if store is None or await asyncio.to_thread(store.has_source, namespace, name, revision):
        return
    tree = await asyncio.to_thread(mirror.tree_id, revision)
    if await asyncio.to_thread(store.has_tree, namespace, name, tree):
        await asyncio.to_thread(store.put_source, namespace, name, revision, tree, None)
        return
    with tempfile.TemporaryDirectory(prefix="burrito-py-archive-") as tmp:
        archive = Path(tmp) / "source.tar.gz"
        # Never larger than the datastore stores: a tree bomb's archive is stopped there, not after it is made.
        await asyncio.to_thread(mirror.archive, revision, archive, max_bytes=ctx.settings.max_source_bytes)
        await asyncio.to_thread(store.put_source, namespace, name, revision, tree, archive)


_TREES: dict[tuple[str, str], TerragruntTree] = {}  # (mirror, head) → its Terragrunt tree: read once per head
_TREES_KEPT = 8  # at most 16 MiB of .hcl text and symlink targets each (GitMirror.terragrunt_tree)


def terragrunt_tree(mirror: GitMirror, head: str) -> TerragruntTree:
    key = (str(mirror.path), head)
    tree = _TREES.get(key)
    if tree is None:
        tree = mirror.terragrunt_tree(head)
        if len(_TREES) >= _TREES_KEPT:
            _TREES.pop(next(iter(_TREES)))
        _TREES[key] = tree
    return tree


def _branch_patches(
    mirror: GitMirror, layers: list[Body], head: str, head_date: datetime, repository: Body | None = None
) -> list[tuple[Body, dict[str, str | None]]]:
    """Each layer's annotation patch for a new head, layers with a relevant change first (they are the ones
    waiting to plan). Layers usually share their diff base, so each diff runs once, not once per layer.
    Terragrunt layers get their unit's analysis too (terragrunt.py), and what it reads as trigger paths."""
    diffs: dict[str, list[Change]] = {}
    wants_tree = any(terragrunt_enabled(layer, repository) for layer in layers)
    terragrunt = decide_terragrunt(terragrunt_tree(mirror, head) if wants_tree else None, layers, repository)

    def changes(base: str) -> list[Change]:
        if base not in diffs:
            diffs[base] = mirror.changes(base, head)
        return diffs[base]

    patches: list[tuple[Body, dict[str, str | None]]] = []
    for layer in layers:
        annotations = layer["metadata"].get("annotations") or {}
        spec = layer.get("spec") or {}
        base = diff_base(annotations)
        found = changes(base) if base and base != head else ([] if base else None)
        unit = terragrunt[key_of(layer)]
        try:
            patch: dict[str, str | None] = dict(decide_layer_commits(
                annotations, head, head_date, found, spec.get("path", ""),
                [*(spec.get("additionalTriggerPaths") or ()), *unit.reads],
            ))
        except ValueError as exc:  # an invalid path; the CRD schema normally refuses it first
            log.warning("layer %s/%s: %s", layer["metadata"]["namespace"], layer["metadata"]["name"], exc)
            continue
        if annotations.get(ann.TERRAGRUNT) != unit.annotation:
            patch[ann.TERRAGRUNT] = unit.annotation  # None removes it (Terragrunt turned off)
        if patch:
            patches.append((layer, patch))
    patches.sort(key=lambda item: ann.RELEVANT_COMMIT not in item[1])
    return patches


async def _annotate_layer(ctx: Context, layer: Body, patch: Mapping[str, str | None], head: str) -> None:
    meta = layer["metadata"]
    try:
        updated = await ctx.kube.merge_patch(
            crd_path("terraformlayers", meta["namespace"], meta["name"]), {"metadata": {"annotations": patch}}
        )
    except KubeError as exc:
        if exc.status >= 500 or exc.status == 0:  # the API did not answer: the whole sync is tried again
            raise
        # The API refused this layer's patch (a 422: its annotations over the size limit; a 404: deleted meanwhile):
        # its own failure, told on it once per head. The repository's other layers are still told, its status
        # written; this layer's patch is tried again at the next poll.
        if exc.status != 404:
            key = hashlib.sha256(head.encode()).hexdigest()[:16]
            await post_event(ctx.kube, layer, "Warning", "CommitNotRecorded",
                             f"the repository controller cannot record the head {head} of branch "
                             f"{(layer.get('spec') or {}).get('branch')} on this layer: {exc.status} {exc.reason}: "
                             f"{exc.message[:300]}", name=f"{meta['name'][:200].rstrip('.-')}.not-recorded-{key}")
        return
    ctx.inventory.layers.observe(updated)
    ctx.wake_layer(key_of(updated))


async def _write_status(
    ctx: Context, repository: Body, state: str, branches: list[Body], synced: Cond, now: datetime, webhooks: Cond,
    generated: Cond | None = None,
) -> None:
    key = key_of(repository)
    async with ctx.repository_status_lock(key):
        # The latest copy: the pull request poll (controllers/pullrequest/poll.py) may have written its condition
        # since this reconcile began, and keeps it while the repository polls.
        current = ctx.inventory.repositories.get(key) or repository
        old = current.get("status") or {}
        polled = [Cond(str(c.get("type")), c.get("status") == "True", str(c.get("reason") or ""),
                       str(c.get("message") or "")) for c in old.get("conditions") or ()
                  if c.get("type") == POLLED and polling(current)]
        status = {
            "state": state,
            "branches": branches,
            "conditions": merge_conditions(old.get("conditions"),
                                           (synced, webhooks, *([generated] if generated else ()), *polled), now),
        }
        if all(status[k] == old.get(k) for k in status):
            return
        meta = repository["metadata"]
        updated = await ctx.kube.merge_patch(
            crd_path("terraformrepositories", meta["namespace"], meta["name"], "status"), {"status": status}
        )
        ctx.inventory.repositories.observe(updated)
    old_synced = next((c for c in old.get("conditions") or () if c.get("type") == "Synced"), None)
    if not synced.status and (old_synced is None or old_synced.get("message") != synced.message):
        await post_event(ctx.kube, repository, "Warning", synced.reason, synced.message)
