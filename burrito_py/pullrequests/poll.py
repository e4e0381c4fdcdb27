"""Pull requests without webhooks (docs/architecture.md §11.3): what one poll of the git host changes. Pure.

A poll gathers the host's open pull requests (each read into the event its webhook would carry, by the provider's
own reading) and the repository's TerraformPullRequests; `decide_poll` turns them into the writes the webhooks
would have made (`events.pull_request_write`, the one way an event becomes an object):

- an open pull request not recorded, recorded closed or merged (a reopen), or recorded at another head: written
  as its `opened` event (created, or its spec merge-patched);
- a pull request recorded open that the host no longer lists: written as the host says it is now (closed or
  merged, from `looked_up`); one the host no longer knows (404) is closed as recorded;
- an event older than the one recorded (`updatedAt`) writes nothing, as for a replayed webhook;
- nothing else: a title edit writes nothing, as its webhook changes no plan either.

When the listing is incomplete (more than the poll's pages), no pull request is closed: one not listed may be
open on a later page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from burrito_py.durations import parse_duration
from burrito_py.gitproviders.base import PullRequestEvent
from burrito_py.pullrequests.events import PullRequestWrite, older, pull_request_write

__all__ = ["CONDITION", "DEFAULT_INTERVAL", "MAX_LOOKUPS", "MIN_INTERVAL", "HostSnapshot", "PollDecision", "PollMemory",
           "decide_poll",
           "next_poll", "poll_interval", "polling", "recorded_of", "to_look_up"]

CONDITION = "PullRequestsPolled"  # on the TerraformRepository
DEFAULT_INTERVAL = timedelta(minutes=1)
MIN_INTERVAL = timedelta(seconds=10)
MAX_LOOKUPS = 20  # pull requests gone from the listing read one by one per poll; the rest at the next


@dataclass(frozen=True)
class HostSnapshot:
    """What the host said in one poll."""

    open: tuple[PullRequestEvent, ...]
    complete: bool
    # Pull requests recorded open and not listed: as the host says they are now (None: it has no such one).
    looked_up: Mapping[int, PullRequestEvent | None] = field(default_factory=dict)


@dataclass(frozen=True)
class PollDecision:
    writes: tuple[PullRequestWrite, ...]
    opened: tuple[int, ...]  # created or reopened
    updated: tuple[int, ...]  # a new head
    closed: tuple[int, ...]  # closed or merged


def recorded_of(pull_requests: Sequence[Mapping[str, Any]], repository: str, provider: str
                ) -> dict[int, Mapping[str, Any]]:
    """The spec of each TerraformPullRequest of `repository` (the poll's namespace) for `provider`, by number."""
    found: dict[int, Mapping[str, Any]] = {}
    for body in pull_requests:
        spec = body.get("spec") or {}
        number = spec.get("number")
        if spec.get("repository") == repository and spec.get("provider") == provider and isinstance(number, int):
            found[number] = spec
    return found


def to_look_up(recorded: Mapping[int, Mapping[str, Any]], listed: Sequence[PullRequestEvent], complete: bool,
               limit: int = MAX_LOOKUPS) -> tuple[int, ...]:
    """The pull requests recorded open that a complete listing lacks (the lowest numbers first, at most `limit`)."""
    if not complete:
        return ()
    numbers = {event.number for event in listed}
    return tuple(sorted(n for n, spec in recorded.items() if spec.get("state") == "open" and n not in numbers))[:limit]


def _gone(spec: Mapping[str, Any], provider: str, number: int) -> PullRequestEvent:
    """A pull request the host no longer has: closed, as recorded (no time: it replaces no newer event)."""
    return PullRequestEvent(provider, "closed", number, str(spec.get("base") or ""),
                            str(spec.get("headBranch") or ""), str(spec.get("headSha") or ""),
                            str(spec.get("title") or ""), str(spec.get("url") or ""), str(spec.get("project") or ""),
                            from_fork=bool(spec.get("fromFork", True)), author=str(spec.get("author") or ""))


def _changes(event: PullRequestEvent, spec: Mapping[str, Any] | None) -> bool:
    """Whether the event changes what a webhook's event would change: the state, or the head of an open one."""
    if spec is None:
        return event.action not in ("closed", "merged")  # a close of one never seen creates nothing
    if older(event.updated_at or None, spec.get("updatedAt")):
        return False
    state = {"closed": "closed", "merged": "merged"}.get(event.action, "open")
    return spec.get("state") != state or (state == "open" and spec.get("headSha") != event.head_sha)


def decide_poll(repository: str, settings: Mapping[str, Any] | None, provider: str,
                recorded: Mapping[int, Mapping[str, Any]], host: HostSnapshot) -> PollDecision:
    """The writes one poll makes for `repository` (its name; `settings` its `spec.pullRequests`)."""
    writes: list[PullRequestWrite] = []
    opened: list[int] = []
    updated: list[int] = []
    closed: list[int] = []
    seen: set[int] = set()
    events = [*host.open, *(found if found is not None else _gone(recorded[number], provider, number)
                            for number, found in sorted(host.looked_up.items()) if number in recorded)]
    for event in events:
        if event.number in seen or event.provider != provider:
            continue
        seen.add(event.number)
        spec = recorded.get(event.number)
        if not _changes(event, spec):
            continue
        writes.append(pull_request_write(event, repository, settings))
        if event.action in ("closed", "merged"):
            closed.append(event.number)
        elif spec is None or spec.get("state") != "open":
            opened.append(event.number)
        else:
            updated.append(event.number)
    return PollDecision(tuple(writes), tuple(opened), tuple(updated), tuple(closed))


def polling(repository: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The repository's `spec.pullRequests.poll` when it plans pull requests and polls its host, else None."""
    settings = (repository.get("spec") or {}).get("pullRequests") or {}
    poll = settings.get("poll")
    return poll if settings.get("enabled") and isinstance(poll, Mapping) else None


def poll_interval(poll: Mapping[str, Any] | None) -> timedelta:
    """The poll's interval: `interval` (Go-style) or 1m; never under 10 s."""
    text = (poll or {}).get("interval")
    try:
        interval = parse_duration(text) if text else DEFAULT_INTERVAL
    except ValueError:
        interval = DEFAULT_INTERVAL  # the CRD's pattern refuses what this cannot read
    return max(interval, MIN_INTERVAL)


def next_poll(last: datetime | None, interval: timedelta, not_before: datetime | None, now: datetime) -> float:
    """Seconds until the next poll is due (0: now): `interval` after the last one, and not before a rate limit's
    end."""
    due = last + interval if last is not None else now
    if not_before is not None and not_before > due:
        due = not_before
    return max((due - now).total_seconds(), 0.0)


@dataclass
class PollMemory:
    """When each repository was last polled, and until when its host asked us to wait (a rate limit). Kept in
    the controllers' memory: a restart polls at once, which a poll every interval does anyway."""

    last: dict[tuple[str, str], datetime] = field(default_factory=dict)
    not_before: dict[tuple[str, str], datetime] = field(default_factory=dict)

    def forget(self, key: tuple[str, str]) -> None:
        self.last.pop(key, None)
        self.not_before.pop(key, None)
