"""Pull request API clients (GitHub, GitLab, Gitea) and publishing one update within a call budget (issue 15
item 6).

Each client speaks its provider's documented REST routes, with the token from the repository's Secret:

- GitHub: `GET/POST /repos/{o}/{r}/issues/{n}/comments`, `PATCH /repos/{o}/{r}/issues/comments/{id}`,
  `POST /repos/{o}/{r}/statuses/{sha}`;
- GitLab: `GET/POST /projects/{id}/merge_requests/{iid}/notes`, `PUT …/notes/{id}`,
  `POST /projects/{id}/statuses/{sha}`;
- Gitea: GitHub's routes under `/api/v1`, with `token` authorization and `page`/`limit` paging.

Rate limits: a 429, or a 403 with `X-RateLimit-Remaining: 0` (GitHub's secondary limits), waits `Retry-After`
or until `X-RateLimit-Reset` (GitHub, Gitea: epoch seconds; GitLab `RateLimit-Reset` too), at most
`MAX_WAIT` seconds, then tries once more. Tokens never appear in errors or logs, and never go to another origin
than the API URL's (a `Link` to another host is not followed). Connections go through the outbound address guard.

`publish` makes one update: the comment (listed only when its id is not known yet, then created or edited only
when its body changed) and the commit statuses that changed: the aggregate always (branch protection reads it),
the per-layer ones within a fixed budget of calls per update; those left over wait for the next update.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from burrito_py.outbound import GuardedTransport, OutboundPolicy
from burrito_py.pullrequests.statuses import AGGREGATE_CONTEXT, CommitStatus, comment_update, statuses_to_send

__all__ = [
    "CALL_BUDGET",
    "GitHub",
    "GitLab",
    "Gitea",
    "ProviderClient",
    "ProviderError",
    "Published",
    "body_digest",
    "connection_failure",
    "publish",
]

CALL_BUDGET = 3
MAX_WAIT = 60.0


class ProviderError(Exception):
    """A provider refused or failed a call; the message names the call, never the token."""


class ProviderClient(Protocol):
    @property
    def calls(self) -> int: ...  # API calls made so far (rate-limit retries included)

    def list_comments(self) -> dict[str, str]: ...
    def close(self) -> None: ...
    def create_comment(self, body: str) -> str: ...
    def edit_comment(self, comment_id: str, body: str) -> None: ...
    def set_status(self, sha: str, status: CommitStatus, target_url: str | None) -> None: ...


def connection_failure(exc: httpx.HTTPError) -> str:
    """What a failed call says: the same words whether the port was closed, filtered or reset, so a status never
    answers a port scan (docs/architecture.md §8, "Outbound calls")."""
    return "could not connect" if isinstance(exc, httpx.TransportError) else type(exc).__name__


class _Http:
    """One provider's HTTP: auth header, rate-limit waits, call counting; connections through the outbound address
    guard (burrito_py/outbound.py), and never a request carrying the token to another origin than the API's."""

    def __init__(self, base_url: str, headers: Mapping[str, str], *, sleep: Callable[[float], None],
                 outbound: OutboundPolicy) -> None:
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=dict(headers), timeout=30.0,
                                    transport=GuardedTransport(outbound))
        self._origin = _origin(httpx.URL(base_url))
        self._sleep = sleep
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
            self.calls += 1
            try:
                response = self._client.request(method, path, **kw)
            except httpx.HTTPError as exc:
                raise ProviderError(f"{what}: {connection_failure(exc)}") from None
            wait = _rate_limited(response)
            if wait is not None and attempt == 1:
                self._sleep(min(wait, MAX_WAIT))
                continue
            if response.status_code >= 400:
                raise ProviderError(f"{what}: HTTP {response.status_code} {_message(response)}")
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


@dataclass
class GitHub:
    """GitHub's REST API (`api_url` https://api.github.com, or a GitHub Enterprise `/api/v3`)."""

    api_url: str
    owner: str
    repo: str
    number: int
    token: str = field(repr=False)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)  # rate-limit waits (tests pass their own)
    # What the API may resolve to besides public addresses (the default: nothing internal).
    outbound: OutboundPolicy = field(default_factory=OutboundPolicy, repr=False)
    http: _Http = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.http = _Http(self.api_url, {"Authorization": f"Bearer {self.token}",
                                         "Accept": "application/vnd.github+json",
                                         "X-GitHub-Api-Version": "2022-11-28"}, sleep=self.sleep,
                          outbound=self.outbound)

    @property
    def calls(self) -> int:
        return self.http.calls

    def close(self) -> None:
        self.http.close()

    def _repo(self) -> str:
        return f"/repos/{quote(self.owner, safe='')}/{quote(self.repo, safe='')}"

    def list_comments(self) -> dict[str, str]:
        found: dict[str, str] = {}
        url: str | None = f"{self._repo()}/issues/{self.number}/comments?per_page=100"
        while url is not None:
            response = self.http.request("GET", url, "listing the pull request's comments")
            found.update({str(c["id"]): str(c.get("body") or "") for c in response.json()})
            url = response.links.get("next", {}).get("url")
        return found

    def create_comment(self, body: str) -> str:
        response = self.http.request("POST", f"{self._repo()}/issues/{self.number}/comments", "creating the comment",
                                     json={"body": body})
        return str(response.json()["id"])

    def edit_comment(self, comment_id: str, body: str) -> None:
        self.http.request("PATCH", f"{self._repo()}/issues/comments/{quote(comment_id, safe='')}",
                          "editing the comment", json={"body": body})

    def set_status(self, sha: str, status: CommitStatus, target_url: str | None) -> None:
        payload = {"state": status.state, "context": status.context, "description": status.description,
                   **({"target_url": target_url} if target_url else {})}
        self.http.request("POST", f"{self._repo()}/statuses/{quote(sha, safe='')}", f"status {status.context}",
                          json=payload)


@dataclass
class GitLab:
    """GitLab's REST API v4 (`api_url` https://gitlab.com/api/v4); `project` is the id or `group/name`."""

    api_url: str
    project: str
    number: int  # the merge request's iid
    token: str = field(repr=False)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    outbound: OutboundPolicy = field(default_factory=OutboundPolicy, repr=False)
    http: _Http = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.http = _Http(self.api_url, {"PRIVATE-TOKEN": self.token}, sleep=self.sleep, outbound=self.outbound)

    @property
    def calls(self) -> int:
        return self.http.calls

    def close(self) -> None:
        self.http.close()

    def _mr(self) -> str:
        return f"/projects/{quote(self.project, safe='')}/merge_requests/{self.number}"

    def list_comments(self) -> dict[str, str]:
        found: dict[str, str] = {}
        page: str | None = "1"
        while page:
            response = self.http.request("GET", f"{self._mr()}/notes", "listing the merge request's notes",
                                         params={"per_page": 100, "page": page, "sort": "asc"})
            found.update({str(n["id"]): str(n.get("body") or "") for n in response.json() if not n.get("system")})
            page = response.headers.get("X-Next-Page") or None
        return found

    def create_comment(self, body: str) -> str:
        response = self.http.request("POST", f"{self._mr()}/notes", "creating the note", json={"body": body})
        return str(response.json()["id"])

    def edit_comment(self, comment_id: str, body: str) -> None:
        self.http.request("PUT", f"{self._mr()}/notes/{quote(comment_id, safe='')}", "editing the note",
                          json={"body": body})

    def set_status(self, sha: str, status: CommitStatus, target_url: str | None) -> None:
        state = {"pending": "pending", "success": "success", "failure": "failed"}[status.state]
        payload = {"state": state, "name": status.context, "description": status.description,
                   **({"target_url": target_url} if target_url else {})}
        self.http.request("POST", f"/projects/{quote(self.project, safe='')}/statuses/{quote(sha, safe='')}",
                          f"status {status.context}", json=payload)


@dataclass
class Gitea(GitHub):
    """Gitea's REST API (`api_url` https://gitea.example/api/v1): GitHub's routes, `token` authorization."""

    def __post_init__(self) -> None:
        self.http = _Http(self.api_url, {"Authorization": f"token {self.token}", "Accept": "application/json"},
                          sleep=self.sleep, outbound=self.outbound)

    def list_comments(self) -> dict[str, str]:
        found: dict[str, str] = {}
        page = 1
        while True:
            response = self.http.request("GET", f"{self._repo()}/issues/{self.number}/comments",
                                         "listing the pull request's comments", params={"page": page, "limit": 50})
            items = response.json()
            found.update({str(c["id"]): str(c.get("body") or "") for c in items})
            if len(items) < 50:
                return found
            page += 1


@dataclass(frozen=True, slots=True)
class Published:
    comment_id: str | None
    sent: dict[str, CommitStatus]  # what the head now carries, as far as we sent it
    calls: int


def body_digest(body: str) -> str:
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def publish(client: ProviderClient, marker: str, body: str, known_comment: str | None, known_digest: str | None,
            head: str, statuses: Sequence[CommitStatus], sent: Mapping[str, CommitStatus],
            target_url: str | None = None, budget: int = CALL_BUDGET) -> Published:
    """One update: the comment, then the statuses that changed (the aggregate first, always; the others within
    `budget` calls in all).
    `known_comment`/`known_digest`: the comment's id and `body_digest` as last published (kept on the
    TerraformPullRequest), so an unchanged body costs no call at all."""
    start = client.calls
    comment_id = known_comment
    if comment_id is None:
        found = comment_update(client.list_comments(), marker, body)
        comment_id = found.comment_id
        if found.action == "create":
            comment_id = client.create_comment(body)
        elif found.action == "edit":
            assert comment_id is not None
            client.edit_comment(comment_id, body)
    elif known_digest != body_digest(body):
        client.edit_comment(comment_id, body)
    now = dict(sent)
    pending = sorted(statuses_to_send(statuses, sent), key=lambda s: s.context != AGGREGATE_CONTEXT)
    for status in pending:
        # The aggregate always goes (branch protection reads it); the per-layer statuses within the budget.
        if status.context != AGGREGATE_CONTEXT and client.calls - start >= budget:
            break
        client.set_status(head, status, target_url)
        now[status.context] = status
    return Published(comment_id, now, client.calls - start)
