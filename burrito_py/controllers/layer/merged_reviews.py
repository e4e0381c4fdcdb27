"""Gathering what merged pull requests say of a layer's plan (issue 30 item 4; the decision is reviewed.py).

From the inventory: the TerraformPullRequests of the layer's namespace, merged into the branch it follows, whose
`status.merged` (written by the pull request controller alone) lists the layer. For a merge recorded as reviewed,
the layer's inputs (`pullrequests.affected.layer_inputs`) are compared in the repository's git mirror between the
commit the layer planned and the merged head (one `ls-tree` per side; the answer is kept per commit pair and
paths, so a layer at rest asks git nothing). A mirror that cannot answer leaves the comparison unknown, which
approves nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.reviewed import MergedReview
from burrito_py.controllers.repository.reconcile import mirror_for
from burrito_py.git.mirror import GitError
from burrito_py.pullrequests.affected import layer_inputs
from burrito_py.timeutil import parse_time

log = logging.getLogger(__name__)


async def merged_reviews(ctx: Context, layer: Mapping[str, Any]) -> tuple[MergedReview, ...]:
    """The merged pull requests that changed `layer` since its last apply, each with its tree comparison; none
    while the layer has no plan waiting to be applied (so a layer at rest reads nothing)."""
    meta, spec = layer["metadata"], layer.get("spec") or {}
    a: Mapping[str, str] = meta.get("annotations") or {}
    plan_sum, plan_commit = a.get(ann.PLAN_SUM), a.get(ann.PLAN_COMMIT)
    if not plan_sum or not plan_commit or a.get(ann.APPLY_SUM) == plan_sum or meta.get("deletionTimestamp"):
        return ()
    namespace, name = str(meta["namespace"]), str(meta["name"])
    ref = spec.get("repository") or {}
    if (ref.get("namespace") or namespace) != namespace:
        return ()  # a pull request plans only the layers of its repository's namespace
    last_apply = parse_time(a.get(ann.APPLY_DATE))
    found: list[MergedReview] = []
    for pull_request in ctx.inventory.pull_requests:
        pr_meta, pr_spec = pull_request["metadata"], pull_request.get("spec") or {}
        merged = (pull_request.get("status") or {}).get("merged") or {}
        if (pr_meta.get("namespace") != namespace or pr_spec.get("state") != "merged" or not merged
                or pr_spec.get("repository") != ref.get("name") or pr_spec.get("base") != spec.get("branch")):
            continue
        entry = next((e for e in merged.get("layers") or () if (e.get("namespace"), e.get("name")) ==
                      (namespace, name)), None)
        at = parse_time(merged.get("at"))
        head = str(merged.get("headSha") or "")
        if entry is None or at is None or (last_apply is not None and at <= last_apply):
            continue
        reason = str(merged.get("reason") or "")
        same, contains = (await _compare(ctx, layer, plan_commit, head)) if head else (None, False)
        digest = entry.get("changesDigest") or None
        if not reason and digest is None:
            reason = "its plan at the merged head did not succeed, so nothing of it was reviewed"
        found.append(MergedReview(str(pr_meta["name"]), int(pr_spec.get("number") or 0), head, at, digest, reason,
                                  same, contains))
    return tuple(found)


async def _compare(ctx: Context, layer: Mapping[str, Any], commit: str, head: str) -> tuple[bool | None, bool]:
    """(the layer's inputs are the same at `commit` and `head` (None: unknown), `head` is in `commit`'s history)."""
    repository = ctx.inventory.repository_of(layer)
    if repository is None:
        return None, False
    paths = layer_inputs(layer)
    rmeta = repository["metadata"]
    url = str(((repository.get("spec") or {}).get("repository") or {}).get("url") or "")
    memo = ctx.pull_request_memory.trees
    key = (str(rmeta["namespace"]), str(rmeta["name"]), url, commit, head, *paths)
    if key in memo:
        return memo[key]
    mirror = mirror_for(ctx.settings.git_cache_dir, rmeta["namespace"], rmeta["name"], url,
                        ctx.settings.outbound_policy())
    try:
        same = await asyncio.to_thread(mirror.same_paths, commit, head, paths)
        contains = await asyncio.to_thread(mirror.is_ancestor, head, commit)
    except (GitError, ValueError) as exc:
        log.info("layer %s/%s: cannot compare %s with the merged head %s: %s", layer["metadata"]["namespace"],
                 layer["metadata"]["name"], commit[:12], head[:12], exc)
        return None, False  # not kept: the mirror may hold both commits at the next reconcile
    if len(memo) > 4096:
        memo.clear()  # a bound, not a cache policy: a comparison costs three git calls
    memo[key] = (same, contains)
    return same, contains
