"""What the providers' API clients share (docs/architecture.md §11.3): the client Protocol, the commit status
they send, their errors, and one provider's HTTP.

Rate limits: a 429, or a 403 with `X-RateLimit-Remaining: 0` (GitHub's secondary limits), waits `Retry-After`
or until `X-RateLimit-Reset` (GitHub, Gitea: epoch seconds; GitLab `RateLimit-Reset` too) when that is at most
`MAX_WAIT` seconds (a poll's HTTP: its `give_up_after`), then tries once more; a longer wait, or a second limit,
raises `RateLimited` with the wait asked, at once: the calling thread is one of the controllers' few, shared by
every tenant's reconciles, and a host answering `Retry-After: 600` (a tenant names its pull requests' `apiUrl`)
must never hold it. A long limit is remembered for its origin and token (`RateLimits`, one per process) until it
ends: every client of that token (a reconcile retried in 15 s, another pull request's, the poll) is refused at once
with the same `RateLimited`, and makes no call (GitHub's REST guidance: an integration that goes on calling while
rate limited may be banned). A poll also stops at its `deadline`. Tokens never appear in errors or
logs, and never go to another origin than the API URL's (a `Link` to another host is not followed). Connections go
through the outbound address guard.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import httpx

from burrito_py.outbound import GuardedTransport, OutboundPolicy

__all__ = [
    "MAX_APPROVERS_ASKED",
    "MAX_WAIT",
    "ApiHttp",
    "CommitStatus",
    "ProviderClient",
    "ProviderError",
    "RateLimited",
    "RateLimits",
    "ReviewFacts",
    "StatusState",
    "approvers_with_write",
    "connection_failure",
]

MAX_WAIT = 5.0
# The longest rate limit remembered: a host asking for days is asked again after an hour.
MAX_REMEMBERED = 3600.0
StatusState = Literal["pending", "success", "failure"]


class ProviderError(Exception):
    """A provider refused or failed a call; the message names the call, never the token. `status`: the HTTP status
    of the provider's answer, when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RateLimited(ProviderError):
    """The provider asked to wait longer than the caller may (`ApiHttp(give_up_after=…)`): `retry_after` seconds."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RateLimits:
    """Until when each (origin, token) is rate limited, and for how long its provider asked: shared by the clients of
    a process. Keys hold a digest of the credentials, never the token."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[tuple[str, str], tuple[float, float]] = {}
        self._lock = threading.Lock()

    def asked(self, key: tuple[str, str]) -> tuple[float, float] | None:
        """(seconds still to wait, seconds the provider asked for), or None when the key is not limited."""
        with self._lock:
            held = self._until.get(key)
            if held is None:
                return None
            left = held[0] - self._clock()
            if left <= 0:
                del self._until[key]
                return None
            return left, held[1]

    def note(self, key: tuple[str, str], wait: float) -> None:
        now = self._clock()
        with self._lock:
            for stale in [k for k, (until, _) in self._until.items() if until <= now]:
                del self._until[stale]
            self._until[key] = (now + min(wait, MAX_REMEMBERED), wait)


LIMITS = RateLimits()


@dataclass(frozen=True, slots=True)
class CommitStatus:
    context: str
    state: StatusState
    description: str


@dataclass(frozen=True, slots=True)
class ReviewFacts:
    """What a pull request's apply requirements are checked against (§11.3, "Apply requirements"), as the
    provider says now."""

    author: str  # who opened it
    approved_by: tuple[str, ...]  # reviewers whose latest review approves and who may write (GitLab: the approvals)
    mergeable: bool | None  # None: the provider has not computed it yet
    behind: int | None  # commits of the base the head lacks (0: undiverged); None: the provider did not say


MAX_APPROVERS_ASKED = 20  # approvals whose author's permission one review asks (each a call); the rest not counted


def approvers_with_write(approved: Iterable[str], may_write: Callable[[str], bool]) -> tuple[str, ...]:
    """The approvers whose approval counts: those the provider says may write to the repository. GitHub, Gitea and
    Bitbucket let any account that reads a pull request approve it (the author's second account; anyone, on a
    public repository), which is nobody's review. At most `MAX_APPROVERS_ASKED` are asked, in name order: more
    approvals than that from accounts without write permission make the requirement fail, never pass."""
    logins = sorted({login for login in approved if login})
    return tuple(login for login in logins[:MAX_APPROVERS_ASKED] if may_write(login))


class ProviderClient(Protocol):
    @property
    def calls(self) -> int: ...  # API calls made so far (rate-limit retries included)

    def list_comments(self) -> dict[str, str]: ...
    def close(self) -> None: ...
    def create_comment(self, body: str) -> str: ...
    def edit_comment(self, comment_id: str, body: str) -> None: ...
    def set_status(self, sha: str, status: CommitStatus, target_url: str | None) -> None: ...

    def write_permission(self, login: str, user_id: int | None) -> bool:
        """Whether `login` (GitLab: user `user_id`) may write to the repository (push, merge)."""
        ...

    def review_facts(self, base: str, head: str) -> ReviewFacts:
        """The pull request's author, approvals, mergeability and how far `head` is behind `base`."""
        ...


def connection_failure(exc: httpx.HTTPError) -> str:
    """What a failed call says: the same words whether the port was closed, filtered or reset, so a status never
    answers a port scan (docs/architecture.md §8, "Outbound calls")."""
    return "could not connect" if isinstance(exc, httpx.TransportError) else type(exc).__name__


class ApiHttp:
    """One provider's HTTP: auth header, rate-limit waits, call counting; connections through the outbound address
    guard (burrito_py/outbound.py), and never a request carrying the token to another origin than the API's."""

    def __init__(self, base_url: str, headers: Mapping[str, str], *, sleep: Callable[[float], None],
                 outbound: OutboundPolicy, timeout: float = 30.0, give_up_after: float | None = None,
                 deadline: float | None = None, limits: RateLimits = LIMITS) -> None:
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=dict(headers), timeout=timeout,
                                    transport=GuardedTransport(outbound))
        self._origin = _origin(httpx.URL(base_url))
        self._sleep = sleep
        # A poll (§11.3, "Polling") waits for a rate limit only this long; a longer wait is RateLimited, and
        # it gives up at `deadline` (time.monotonic()), so one slow host never holds a poll past its bound.
        self._give_up_after = give_up_after
        self._deadline = deadline
        self._limits = limits
        credentials = "\n".join(f"{k.lower()}:{v}" for k, v in sorted(headers.items()))
        scheme, host, port = self._origin
        self._limit_key = (f"{scheme}://{host}:{port}", hashlib.sha256(credentials.encode()).hexdigest())
        self.calls = 0

    def close(self) -> None:
        self._client.close()

    def request(self, method: str, path: str, what: str, **kw: Any) -> httpx.Response:
        # A path may be a URL the provider gave (GitHub's `Link: <…>; rel="next"`): the token goes to the API's own
        # origin only, whatever an answer says.
        target = self._client.base_url.join(path) if not path.startswith(("http://", "https://")) else httpx.URL(path)
        if _origin(target) != self._origin:
            raise ProviderError(f"{what}: the provider pointed to another host ({target.host}); not followed")
        for attempt in (1, 2):
            if self._deadline is not None and time.monotonic() >= self._deadline:
                raise ProviderError(f"{what}: not started, the poll's time is up")
            if (limited := self._limits.asked(self._limit_key)) is not None:  # no call until the limit ends
                raise RateLimited(f"{what}: rate limited by the provider for {limited[1]:.0f} s", limited[0])
            self.calls += 1
            try:
                response = self._client.request(method, path, **kw)
            except httpx.HTTPError as exc:
                raise ProviderError(f"{what}: {connection_failure(exc)}") from None
            wait = _rate_limited(response)
            if wait is not None:
                if wait > (MAX_WAIT if self._give_up_after is None else self._give_up_after) or attempt == 2:
                    self._limits.note(self._limit_key, wait)
                    raise RateLimited(f"{what}: rate limited by the provider for {wait:.0f} s", wait)
                self._sleep(wait)
                continue
            if response.status_code >= 400:
                raise ProviderError(f"{what}: HTTP {response.status_code} {_message(response)}", response.status_code)
            return response
        raise AssertionError("unreachable")


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


def _rate_limited(response: httpx.Response) -> float | None:
    """Seconds to wait before trying again, or None when the answer is no rate limit."""
    limited = response.status_code == 429 or (
        response.status_code == 403 and response.headers.get("X-RateLimit-Remaining") == "0")
    if not limited:
        return None
    retry_after = response.headers.get("Retry-After")
    if retry_after and retry_after.isdigit():
        return float(retry_after)
    reset = response.headers.get("X-RateLimit-Reset") or response.headers.get("RateLimit-Reset")
    if reset and reset.isdigit():
        return max(float(reset) - time.time(), 0.0) + 1.0
    return 1.0


def _message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return ""
    return str(data.get("message") or data.get("error") or "")[:200] if isinstance(data, dict) else ""
