"""What every git provider is (the `GitProvider` Protocol) and shares (docs/architecture.md §11.1, §11.3): pure.

A provider module (`github.py`, …) exposes `PROVIDER: GitProvider`; `registry.py` finds it by the module's name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from burrito_py.gitproviders.client import ProviderClient
from burrito_py.outbound import OutboundPolicy
from burrito_py.timeutil import format_time_precise, parse_time

__all__ = [
    "BLOCK",
    "Action",
    "BadPullRequest",
    "BodyDetecting",
    "CommentEvent",
    "Detected",
    "GitProvider",
    "ListsPullRequests",
    "OpenPullRequests",
    "PollLimits",
    "PullRequestEvent",
    "PullRequestLister",
    "field_of",
    "hmac_key",
    "login_of",
    "repository_urls",
    "time_of",
]

Action = Literal["opened", "updated", "closed", "merged", "labeled"]
Detected = tuple[str, str | None]  # a delivery's event type and its id (None when the provider sends none)
BLOCK = 64  # SHA-256's block size: longer HMAC keys are hashed first


class BadPullRequest(ValueError):
    """The payload lacks what a pull request event must carry (the message names the field)."""


@dataclass(frozen=True, slots=True)
class PullRequestEvent:
    provider: str
    action: Action
    number: int
    base: str  # the branch it would merge into (the branch whose layers it affects)
    head_branch: str
    head_sha: str
    title: str = ""
    url: str = ""
    project: str = ""  # how the provider's API names the repository: `owner/repo`, GitLab `group/project`
    # When the provider last changed the pull request (RFC 3339 UTC): an event older than the one a
    # TerraformPullRequest records is a replay, and ignored (§11.3). Empty only when built by hand.
    updated_at: str = ""
    # Whether the head is a fork's: only a head the delivery shows to be in the base repository itself is trusted
    # as not one (each provider's module says how it tells); unknown is a fork.
    from_fork: bool = True
    author: str = ""  # who opened it (GitHub/Gitea `pull_request.user.login`, GitLab the opener of an `open`)
    sender: str = ""  # who did this (the delivery's `sender.login`, GitLab `user.username`)
    added: tuple[str, ...] = ()  # labeled: the labels added (Gitea: every label it has now)
    removed: tuple[str, ...] = ()  # labeled: the labels removed
    labels_complete: bool = False  # `added` is every label it has now (Gitea): any other is removed


@dataclass(frozen=True, slots=True)
class CommentEvent:
    """A new comment on a pull request (GitHub/Gitea `issue_comment` on a pull request, GitLab `Note Hook` on a
    merge request): where comment commands come from (§11.3, "Comment commands")."""

    provider: str
    number: int
    comment_id: str
    body: str
    sender: str  # the commenter's login
    project: str
    created_at: str = ""  # RFC 3339 UTC
    sender_id: int | None = None  # the commenter's numeric id (GitLab's member API takes it)
    state: str = ""  # open, closed or merged when the payload says ("" unknown)
    head_sha: str = ""  # the head when commented, when the payload says (GitLab); GitHub and Gitea do not


@runtime_checkable
class GitProvider(Protocol):
    """One git provider: how its webhooks look, how its pull requests are named and reached."""

    @property
    def name(self) -> str: ...  # the name in TerraformPullRequest `spec.provider` (and `PullRequestProvider`)

    @property
    def event_header(self) -> str: ...  # the header naming its event type, as messages write it (X-GitHub-Event)

    @property
    def push_events(self) -> frozenset[str]: ...  # the event types of a branch or tag push

    @property
    def comment_limit(self) -> int: ...  # the largest comment it accepts, in characters

    @property
    def github_app(self) -> bool: ...  # whether a Secret's GitHub App keys give its API tokens

    def detect(self, headers: Mapping[str, str]) -> Detected | None:
        """The event type and delivery id when `headers` (lower-case names) are this provider's, else None."""
        ...

    def signature_valid(self, headers: Mapping[str, str], body: bytes, key: bytes) -> bool:
        """Whether the delivery is signed with the webhook secret whose HMAC key (`hmac_key`) is `key` (not
        empty), compared in constant time."""
        ...

    def repository_urls(self, payload: Mapping[str, Any]) -> list[str]:
        """Every URL a delivery's payload gives for its repository (clone, ssh and web forms), each once."""
        ...

    def pull_request_event(self, event: str, payload: Mapping[str, Any]) -> PullRequestEvent | None:
        """What a delivery of `event` means for a pull request; None when nothing. BadPullRequest names a field
        the payload lacks."""
        ...

    def comment_event(self, event: str, payload: Mapping[str, Any]) -> CommentEvent | None:
        """A new comment on a pull request, from a delivery of `event`; None for anything else (edits, deletions,
        comments on issues). BadPullRequest names a field the payload lacks."""
        ...

    def head_ref(self, number: int, head_branch: str) -> str:
        """The git ref of the base repository to fetch pull request `number`'s head from (forks included where
        the provider publishes one; Bitbucket Cloud publishes none: its source branch `head_branch`)."""
        ...

    def default_api_url(self, base: str, host: str) -> str:
        """Its API for a repository served at `base` (`scheme://host[:port]`, `host` its lower-case host)."""
        ...

    def client(self, api_url: str, project: str, number: int, token: Callable[[], str], *,
               sleep: Callable[[float], None], outbound: OutboundPolicy) -> ProviderClient:
        """The API client for pull request `number` of `project`; ValueError when `project` is not a name the
        provider's API takes. `token` is asked only once `project` is known good (an App's token costs a call)."""
        ...


@runtime_checkable
class BodyDetecting(Protocol):
    """A provider whose webhooks carry no header of their own (Azure DevOps' service hooks): it claims a delivery
    from its body, and is asked only after every provider told by its headers declined it (`registry.detect_body`).
    Its `detect` answers None; its `event_header` is empty."""

    def detect_body(self, headers: Mapping[str, str], payload: Mapping[str, Any]) -> Detected | None:
        """The event type and delivery id when the JSON object `payload` is this provider's delivery, else None."""
        ...


@dataclass(frozen=True, slots=True)
class PollLimits:
    """How far one poll of a provider may go (§11.3, "Pull requests without webhooks")."""

    max_pages: int = 10  # of `per_page` pull requests each: beyond them the listing is incomplete
    per_page: int = 100
    timeout: float = 60.0  # seconds for the whole poll; each call also at most 30
    rate_limit_wait: float = 5.0  # a rate limit asking for longer ends the poll (RateLimited) until then


@dataclass(frozen=True, slots=True)
class OpenPullRequests:
    """A provider's open pull requests, each read into the event its webhook would have sent for it (opened)."""

    events: tuple[PullRequestEvent, ...]
    complete: bool  # False when there were more than `PollLimits.max_pages` pages: some are not listed


class PullRequestLister(Protocol):
    """One poll's client of a provider's pull requests (one project); every call through `ApiHttp`."""

    @property
    def calls(self) -> int: ...

    def open_pull_requests(self) -> OpenPullRequests:
        """The open pull requests, within the poll's limits. BadPullRequest names a field an answer lacks."""
        ...

    def pull_request(self, number: int) -> PullRequestEvent | None:
        """Pull request `number` now, read as its webhook's event would be (opened while open, closed or merged
        after); None when the provider has no such pull request (404)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class ListsPullRequests(Protocol):
    """A provider whose open pull requests can be listed: a repository may poll it instead of receiving its
    webhooks (§11.3). Optional: a provider without it is refused a poll (`registry.lister_of`)."""

    def lister(self, api_url: str, project: str, token: Callable[[], str], *, outbound: OutboundPolicy,
               limits: PollLimits, sleep: Callable[[float], None]) -> PullRequestLister:
        """ValueError when `project` is not a name the provider's API takes (as `GitProvider.client`)."""
        ...


def hmac_key(secret: bytes) -> bytes:
    """The key HMAC-SHA256 really uses for `secret` (RFC 2104)."""
    return hashlib.sha256(secret).digest() if len(secret) > BLOCK else secret


def repository_urls(payload: Mapping[str, Any]) -> list[str]:
    """The repository's URLs in GitHub's, GitLab's and Gitea's payloads: any of their keys in `repository` or
    `project`, whichever provider sent it (a URL names a repository whatever key holds it). Only URLs the provider
    makes for the repository itself: GitHub's `homepage` is whatever the repository's admin writes, and one secret
    may sign many repositories' deliveries (an organization's webhook, a GitHub App's), so a repository naming
    another as its homepage would have its deliveries taken for that one's (GitLab's `homepage` is its `web_url`)."""
    sections = [payload.get("repository"), payload.get("project")]
    keys = ("clone_url", "ssh_url", "git_url", "html_url", "url", "git_http_url", "git_ssh_url", "web_url")
    urls = [s[k] for s in sections if isinstance(s, dict) for k in keys if isinstance(s.get(k), str)]
    return list(dict.fromkeys(urls))


def login_of(value: Any, *keys: str) -> str:
    """A login under `value` (a mapping) at the first of `keys` that holds a non-empty string, else ""."""
    if not isinstance(value, Mapping):
        return ""
    return next((str(value[k]) for k in keys if isinstance(value.get(k), str) and value[k]), "")


def field_of(payload: Mapping[str, Any], dotted: str, kind: type) -> Any:
    """`payload`'s value at `dotted` (`pull_request.head.sha`); BadPullRequest when missing or not a `kind`."""
    value: Any = payload
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise BadPullRequest(f"{dotted}: missing or not a {kind.__name__}")
    return value


def time_of(payload: Mapping[str, Any], dotted: str) -> str:
    """A provider's time as RFC 3339 UTC: GitHub and Gitea write RFC 3339, GitLab also `2013-12-03 17:23:34 UTC`."""
    text = field_of(payload, dotted, str).strip()
    parsed = parse_time(text.removesuffix(" UTC") + ("Z" if text.endswith(" UTC") else ""))
    if parsed is None:
        raise BadPullRequest(f"{dotted}: {text[:40]!r} is not a time")
    return format_time_precise(parsed)
