"""Pull requests without webhooks (docs/architecture.md §11.3): a repository with `spec.pullRequests.poll` has
its git host asked for its open pull requests every interval, and its TerraformPullRequests made as its webhooks
would make them.

One poll: gather (the repository's TerraformPullRequests from the inventory; from the host, in a thread, its open
pull requests within the poll's limits and those recorded open that it no longer lists), decide
(`pullrequests.poll.decide_poll`, pure), then write (`pullrequests.writes.write_pull_request`, the server's own
writer) and the repository's `PullRequestsPolled` condition. The token is the one the pull request controller
uses, from the repository's Secret (`spec.repository.secretName`), sent only where its `allowedHosts` allows.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from burrito_py.controllers.context import Context
from burrito_py.controllers.pullrequest.reconcile import api_field, provider_tokens
from burrito_py.git.allowed_hosts import HostNotAllowed
from burrito_py.git.credentials import CredentialsError as GitCredentialsError
from burrito_py.gitproviders.base import BadPullRequest, ListsPullRequests, PollLimits
from burrito_py.gitproviders.client import ProviderError, RateLimited
from burrito_py.gitproviders.registry import lister_of
from burrito_py.kube.client import crd_path
from burrito_py.kube.conditions import Cond, merge_conditions
from burrito_py.kube.events import post_event
from burrito_py.kube.inventory import Body, Key, key_of
from burrito_py.outbound import OutboundPolicy, OutboundRefused
from burrito_py.pullrequests.credentials import CredentialsError, TokenSource, default_api_url, project_of
from burrito_py.pullrequests.poll import (
    CONDITION,
    HostSnapshot,
    decide_poll,
    next_poll,
    poll_interval,
    polling,
    recorded_of,
    to_look_up,
)
from burrito_py.pullrequests.writes import write_pull_request
from burrito_py.timeutil import format_time, utcnow

log = logging.getLogger(__name__)
LIMITS = PollLimits()


async def poll_pull_requests(ctx: Context, key: Key) -> None:
    """The repository's poll when it is due; then the next one is scheduled."""
    repository = ctx.inventory.repositories.get(key)
    if repository is None or repository["metadata"].get("deletionTimestamp"):
        ctx.poll_memory.forget(key)
        return
    poll = polling(repository)
    if poll is None:
        ctx.poll_memory.forget(key)
        await _write_condition(ctx, key, None)  # polling turned off: its condition goes
        return
    interval = poll_interval(poll)
    now = utcnow()
    wait = next_poll(ctx.poll_memory.last.get(key), interval, ctx.poll_memory.not_before.get(key), now)
    if wait > 0:  # woken early (a resync, a spec change): keep to the interval
        ctx.wake_pull_request_poll(key, wait)
        return
    ctx.poll_memory.last[key] = now
    ctx.poll_memory.not_before.pop(key, None)
    try:
        condition = await _poll(ctx, repository, str(poll.get("provider") or ""))
    finally:
        wait = next_poll(now, interval, ctx.poll_memory.not_before.get(key), utcnow())
        ctx.wake_pull_request_poll(key, max(wait, 1.0))
    await _write_condition(ctx, key, condition)


async def _poll(ctx: Context, repository: Body, provider_name: str) -> Cond:
    namespace, name = key_of(repository)
    spec = repository.get("spec") or {}
    settings: Mapping[str, Any] = spec.get("pullRequests") or {}
    provider = lister_of(provider_name)
    if provider is None:
        return Cond(CONDITION, False, "NotSupported",
                    f"spec.pullRequests.poll.provider: {provider_name} cannot be polled (github, gitlab and gitea "
                    "can): use its webhooks")
    url = str((spec.get("repository") or {}).get("url") or "")
    try:
        api_url = str(settings.get("apiUrl") or default_api_url(provider_name, url))
        project = project_of(url)
    except ValueError as exc:
        return Cond(CONDITION, False, "InvalidURL", f"spec.repository.url: {exc}")
    try:
        tokens = await provider_tokens(ctx, repository, provider_name, api_url)
    except HostNotAllowed as exc:  # before any call: the token never left
        return Cond(CONDITION, False, "HostNotAllowed", str(exc))
    except (CredentialsError, GitCredentialsError) as exc:
        return Cond(CONDITION, False, "CredentialsInvalid", str(exc))
    recorded = recorded_of([b for b in ctx.inventory.pull_requests if b["metadata"].get("namespace") == namespace],
                           name, provider_name)
    started = time.monotonic()
    try:
        host = await asyncio.to_thread(_ask_host, provider, api_url, project, tokens, recorded,
                                       ctx.settings.outbound_policy())
    except RateLimited as exc:
        until = utcnow() + timedelta(seconds=exc.retry_after)
        ctx.poll_memory.not_before[key_of(repository)] = until
        return Cond(CONDITION, False, "RateLimited", f"{_host(api_url)}: {exc}; the next poll after "
                    f"{format_time(until)}")
    except OutboundRefused as exc:
        return Cond(CONDITION, False, "AddressNotAllowed", f"{api_field(settings)}: {exc}")
    except ProviderError as exc:
        return Cond(CONDITION, False, "PollFailed", f"{_host(api_url)}: {exc}")
    except BadPullRequest as exc:
        return Cond(CONDITION, False, "PollFailed", f"{_host(api_url)} answered a pull request without what it "
                    f"needs: {exc}")
    except ValueError as exc:  # the project is not a name the provider's API takes
        return Cond(CONDITION, False, "InvalidURL", f"spec.repository.url: {exc}")
    decision = decide_poll(name, settings, provider_name, recorded, host)
    for write in decision.writes:
        outcome = await write_pull_request(ctx.kube, namespace, write)
        if outcome == "written":
            ctx.wake_pull_request((namespace, write.name))
    if decision.writes:
        log.info("repository %s/%s: pull request poll (%.1f s): opened %s, new head %s, closed %s", namespace, name,
                 time.monotonic() - started, list(decision.opened), list(decision.updated), list(decision.closed))
    if not host.complete:
        return Cond(CONDITION, False, "TooManyPullRequests",
                    f"{_host(api_url)} lists more than {len(host.open)} open pull requests: only those are followed "
                    "and none is closed by the poll (use webhooks)")
    return Cond(CONDITION, True, "Polled", f"{len(host.open)} open pull request(s) on {_host(api_url)}")


def _ask_host(provider: ListsPullRequests, api_url: str, project: str, tokens: TokenSource,
              recorded: Mapping[int, Mapping[str, Any]], outbound: OutboundPolicy) -> HostSnapshot:
    """The host's open pull requests, and those recorded open it no longer lists, within the poll's limits."""
    lister = provider.lister(api_url, project, tokens.token, outbound=outbound, limits=LIMITS, sleep=time.sleep)
    try:
        listing = lister.open_pull_requests()
        numbers = to_look_up(recorded, listing.events, listing.complete)
        return HostSnapshot(listing.events, listing.complete, {n: lister.pull_request(n) for n in numbers})
    finally:
        lister.close()


def _host(api_url: str) -> str:
    return api_url.split("://", 1)[-1].split("/", 1)[0]


async def _write_condition(ctx: Context, key: Key, condition: Cond | None) -> None:
    """Set (or, None, remove) the repository's `PullRequestsPolled` condition; a Warning event when it turns to
    a new failure."""
    async with ctx.repository_status_lock(key):
        repository = ctx.inventory.repositories.get(key)
        if repository is None:
            return
        old = (repository.get("status") or {}).get("conditions") or []
        before = next((c for c in old if c.get("type") == CONDITION), None)
        kept = [Cond(str(c.get("type")), c.get("status") == "True", str(c.get("reason") or ""),
                     str(c.get("message") or "")) for c in old if c.get("type") != CONDITION]
        conditions = merge_conditions(old, [*kept, *([condition] if condition else ())], utcnow())
        if conditions == old:
            return
        namespace, name = key
        updated = await ctx.kube.merge_patch(crd_path("terraformrepositories", namespace, name, "status"),
                                             {"status": {"conditions": conditions}})
        ctx.inventory.repositories.observe(updated)
    if condition is not None and not condition.status and (before is None or before.get("message") !=
                                                           condition.message):
        await post_event(ctx.kube, repository, "Warning", condition.reason, condition.message)
