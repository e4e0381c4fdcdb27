"""GitHub (github.com and GitHub Enterprise; docs/architecture.md §11.1, §11.3).

- Webhooks: `X-GitHub-Event`, `X-GitHub-Delivery`; signed `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the
  body>`.
- `pull_request`: `opened`/`reopened` → opened, `synchronize` → updated (a new head), `closed` → closed or merged
  (`pull_request.merged`), `labeled`/`unlabeled` → labeled (Gitea also `label_updated`, `label_cleared`: every
  label it has now), with the labels added and removed and the sender (who may approve a fork's head, §11.3);
  other actions (titles, reviews, assignments) are None: they change no plan. A fork (`from_fork`):
  `pull_request.head.repo` against `base.repo` (by id, else full name); a payload that does not say is one.
- Heads at `refs/pull/<n>/head`; comments up to 65,536 characters; tokens also from a GitHub App.
- API: https://api.github.com for github.com, `/api/v3` on an Enterprise host:
  `GET/POST /repos/{o}/{r}/issues/{n}/comments`, `PATCH /repos/{o}/{r}/issues/comments/{id}`,
  `POST /repos/{o}/{r}/statuses/{sha}`.
- Polling (§11.3): `GET /repos/{o}/{r}/pulls?state=open` (`Link` paging), `GET /repos/{o}/{r}/pulls/{n}`; each
  pull request is read by `pull_request_event` as the `pull_request` webhook carrying it.

Gitea (`gitea.py`) reuses the signature scheme, the event parsing and the client's routes.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from burrito_py.gitproviders.base import (
    Action,
    BadPullRequest,
    CommentEvent,
    Detected,
    GitProvider,
    OpenPullRequests,
    PollLimits,
    PullRequestEvent,
    PullRequestLister,
    field_of,
    login_of,
    repository_urls,
    time_of,
)
from burrito_py.gitproviders.client import (
    ApiHttp,
    CommitStatus,
    ProviderClient,
    ProviderError,
    ReviewFacts,
    approvers_with_write,
)
from burrito_py.outbound import OutboundPolicy

__all__ = ["COMMENT_LIMIT", "PROVIDER", "GitHub", "GitHubProvider", "GitHubPulls", "as_list", "comment_event",
           "from_fork", "owner_repo", "poll_http", "pull_request_event", "sha256_valid"]

COMMENT_LIMIT = 65_536
_ACTIONS: dict[str, Action] = {"opened": "opened", "reopened": "opened", "synchronize": "updated",
                               "synchronized": "updated"}


def sha256_valid(given: str, body: bytes, key: bytes) -> bool:
    """Whether `given` is the hex HMAC-SHA256 of `body` under `key`, compared in constant time."""
    expected = hmac.new(key, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(given.encode(), expected.encode())


def from_fork(pull_request: Mapping[str, Any]) -> bool:
    """Whether a GitHub/Gitea pull request's head is in another repository than its base. Only a head repository
    the payload shows to be the base one (same id, else same full name) is not a fork; a deleted fork (`head.repo`
    null) or a payload without them is."""
    head = (pull_request.get("head") or {}).get("repo") if isinstance(pull_request.get("head"), Mapping) else None
    base = (pull_request.get("base") or {}).get("repo") if isinstance(pull_request.get("base"), Mapping) else None
    if not isinstance(head, Mapping) or not isinstance(base, Mapping):
        return True
    if head.get("fork") is True:
        return True
    for key in ("id", "full_name"):
        h, b = head.get(key), base.get(key)
        if h is not None and b is not None and not isinstance(h, bool) and not isinstance(b, bool):
            return bool(h != b)
    return True


def pull_request_event(provider: str, event: str, payload: Mapping[str, Any]) -> PullRequestEvent | None:
    """A `pull_request` delivery of GitHub or of a provider that writes it as GitHub does (Gitea: `synchronized`,
    `label_updated`, `label_cleared`)."""
    if event != "pull_request":
        return None
    action = field_of(payload, "action", str)
    pull_request = payload.get("pull_request") or {}
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    complete = False
    if action == "closed":
        kind: Action = "merged" if pull_request.get("merged") else "closed"
    elif action in _ACTIONS:
        kind = _ACTIONS[action]
    elif action in ("labeled", "unlabeled"):
        kind = "labeled"
        name = field_of(payload, "label.name", str)
        added, removed = ((name,), ()) if action == "labeled" else ((), (name,))
    elif action in ("label_updated", "label_cleared"):
        # Gitea sends the labels the pull request has now: one not among them is removed.
        kind = "labeled"
        added = tuple(str(label["name"]) for label in pull_request.get("labels") or ()
                      if isinstance(label, Mapping) and isinstance(label.get("name"), str))
        complete = True
    else:
        return None
    return PullRequestEvent(provider, kind, field_of(payload, "pull_request.number", int),
                            field_of(payload, "pull_request.base.ref", str),
                            field_of(payload, "pull_request.head.ref", str),
                            field_of(payload, "pull_request.head.sha", str),
                            str(pull_request.get("title") or ""), str(pull_request.get("html_url") or ""),
                            field_of(payload, "repository.full_name", str),
                            time_of(payload, "pull_request.updated_at"),
                            from_fork=from_fork(pull_request),
                            author=login_of(pull_request.get("user"), "login", "username"),
                            sender=login_of(payload.get("sender"), "login", "username"), added=added,
                            removed=removed, labels_complete=complete)


COMMENT_EVENTS = frozenset({"issue_comment", "pull_request_comment"})  # Gitea may name a pull request's the latter
WRITE_ROLES = frozenset({"admin", "maintain", "write", "owner"})
_REVIEW_STATES = ("APPROVED", "CHANGES_REQUESTED", "REQUEST_CHANGES", "DISMISSED")  # comments change nothing


def comment_event(provider: str, event: str, payload: Mapping[str, Any]) -> CommentEvent | None:
    """An `issue_comment` delivery of GitHub or Gitea: a comment `created` on an issue that is a pull request
    (`issue.pull_request` present; Gitea also `is_pull`). Edits and deletions are None: a command is given once,
    by writing it."""
    if event not in COMMENT_EVENTS or payload.get("action") != "created":
        return None
    issue = payload.get("issue")
    if not isinstance(issue, Mapping) or not (issue.get("pull_request") or payload.get("is_pull") is True):
        return None
    comment = payload.get("comment")
    user = comment.get("user") if isinstance(comment, Mapping) else None
    sender_id = user.get("id") if isinstance(user, Mapping) else None
    state = str(issue.get("state") or "")
    merged = isinstance(issue.get("pull_request"), Mapping) and bool(issue["pull_request"].get("merged_at")
                                                                      or issue["pull_request"].get("merged"))
    comment_id = field_of(payload, "comment.id", int)
    return CommentEvent(provider, field_of(payload, "issue.number", int), str(comment_id),
                        field_of(payload, "comment.body", str),
                        login_of(user, "login", "username") or login_of(payload.get("sender"), "login", "username"),
                        field_of(payload, "repository.full_name", str),
                        time_of(payload, "comment.created_at") if isinstance(comment, Mapping)
                        and comment.get("created_at") else "",
                        sender_id if isinstance(sender_id, int) and not isinstance(sender_id, bool) else None,
                        "merged" if merged else state if state in ("open", "closed") else "")


def owner_repo(provider: str, project: str) -> tuple[str, str]:
    """`owner/repo` split; ValueError naming the provider when it is not that."""
    owner, _, repo = project.strip("/").rpartition("/")
    if not owner or not repo:
        raise ValueError(f"{provider} project {project!r} is not owner/repo")
    return owner, repo


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
    http: ApiHttp = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.http = ApiHttp(self.api_url, _headers(self.token), sleep=self.sleep, outbound=self.outbound)

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

    def write_permission(self, login: str, user_id: int | None) -> bool:
        """`GET /repos/{o}/{r}/collaborators/{login}/permission`: admin, maintain or write (a 404: no access)."""
        try:
            response = self.http.request("GET", f"{self._repo()}/collaborators/{quote(login, safe='')}/permission",
                                         f"asking {login}'s permission")
        except ProviderError as exc:
            if exc.status == 404:
                return False
            raise
        data = response.json()
        return bool({str(data.get("permission") or ""), str(data.get("role_name") or "")} & WRITE_ROLES)

    def _reviews(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        url: str | None = f"{self._repo()}/pulls/{self.number}/reviews?per_page=100"
        while url is not None:
            response = self.http.request("GET", url, "listing the pull request's reviews")
            found.extend(r for r in response.json() if isinstance(r, dict))
            url = response.links.get("next", {}).get("url")
        return found

    def _behind(self, base: str, head: str, pull: Mapping[str, Any]) -> int | None:
        response = self.http.request("GET", f"{self._repo()}/compare/{quote(base, safe='')}...{quote(head, safe='')}",
                                     "comparing the head with the base")
        behind = response.json().get("behind_by")
        return behind if isinstance(behind, int) else None

    def review_facts(self, base: str, head: str) -> ReviewFacts:
        """`GET pulls/{n}` (author, mergeable), its reviews at `head` (each reviewer's latest one counts; dismissed
        or commented ones do not approve), and how far the head is behind the base. A review of an earlier commit is
        stale: GitHub keeps it APPROVED after a push unless branch protection dismisses it (its review carries the
        `commit_id` it was given at, never Gitea's `stale`), and what was pushed after it is nobody's review."""
        pull = self.http.request("GET", f"{self._repo()}/pulls/{self.number}", "reading the pull request").json()
        latest: dict[str, str] = {}
        for review in self._reviews():
            login = login_of(review.get("user"), "login", "username")
            state = str(review.get("state") or "").upper()
            if (login and state in _REVIEW_STATES and not review.get("stale")
                    and str(review.get("commit_id") or "") == head):
                latest[login] = state
        mergeable = pull.get("mergeable")
        approved = approvers_with_write((u for u, s in latest.items() if s == "APPROVED"),
                                        lambda login: self.write_permission(login, None))
        return ReviewFacts(login_of(pull.get("user"), "login", "username"), approved,
                           mergeable if isinstance(mergeable, bool) else None, self._behind(base, head, pull))


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28"}


def poll_http(api_url: str, headers: Mapping[str, str], limits: PollLimits, sleep: Callable[[float], None],
              outbound: OutboundPolicy) -> ApiHttp:
    """A poll's HTTP: calls end at the poll's deadline, and a rate limit longer than it may wait ends the poll."""
    return ApiHttp(api_url, headers, sleep=sleep, outbound=outbound, timeout=min(30.0, limits.timeout),
                   give_up_after=limits.rate_limit_wait, deadline=time.monotonic() + limits.timeout)


@dataclass
class GitHubPulls:
    """One repository's pull requests for a poll (§11.3), each read as its `pull_request` webhook would be."""

    provider: str
    http: ApiHttp
    owner: str
    repo: str
    project: str
    limits: PollLimits

    @property
    def calls(self) -> int:
        return self.http.calls

    def close(self) -> None:
        self.http.close()

    def _repo(self) -> str:
        return f"/repos/{quote(self.owner, safe='')}/{quote(self.repo, safe='')}"

    def _event(self, pull: Any, action: str) -> PullRequestEvent:
        if not isinstance(pull, Mapping):
            raise BadPullRequest("pull_request: not an object")
        base = pull.get("base")
        repository = base.get("repo") if isinstance(base, Mapping) else None
        full_name = repository.get("full_name") if isinstance(repository, Mapping) else None
        # The webhook's `repository` is the base repository; the listing names it in `base.repo`.
        payload = {"action": action, "pull_request": pull, "sender": pull.get("user"),
                   "repository": {"full_name": full_name if isinstance(full_name, str) else self.project}}
        event = pull_request_event(self.provider, "pull_request", payload)
        if event is None:  # `opened` and `closed` are always events
            raise BadPullRequest(f"pull request action {action!r} is not an event")
        return event

    def open_pull_requests(self) -> OpenPullRequests:
        events: list[PullRequestEvent] = []
        url: str | None = f"{self._repo()}/pulls?state=open&per_page={self.limits.per_page}"
        for _ in range(self.limits.max_pages):
            if url is None:
                return OpenPullRequests(tuple(events), True)
            response = self.http.request("GET", url, "listing the open pull requests")
            events.extend(self._event(pull, "opened") for pull in as_list(response.json()))
            url = response.links.get("next", {}).get("url")
        return OpenPullRequests(tuple(events), url is None)

    def pull_request(self, number: int) -> PullRequestEvent | None:
        try:
            pull = self.http.request("GET", f"{self._repo()}/pulls/{int(number)}",
                                     f"reading pull request #{number}").json()
        except ProviderError as exc:
            if exc.status == 404:
                return None
            raise
        state = pull.get("state") if isinstance(pull, Mapping) else None
        return self._event(pull, "closed" if state == "closed" else "opened")


def as_list(data: Any) -> list[Any]:
    if not isinstance(data, list):
        raise BadPullRequest("the listing is not a list")
    return data


class GitHubProvider:
    name = "github"
    event_header = "X-GitHub-Event"
    push_events = frozenset({"push"})
    comment_limit = COMMENT_LIMIT
    github_app = True

    def detect(self, headers: Mapping[str, str]) -> Detected | None:
        if "x-github-event" not in headers:
            return None
        return headers["x-github-event"], headers.get("x-github-delivery")

    def signature_valid(self, headers: Mapping[str, str], body: bytes, key: bytes) -> bool:
        return sha256_valid(headers.get("x-hub-signature-256", "").removeprefix("sha256="), body, key)

    def repository_urls(self, payload: Mapping[str, Any]) -> list[str]:
        return repository_urls(payload)

    def pull_request_event(self, event: str, payload: Mapping[str, Any]) -> PullRequestEvent | None:
        return pull_request_event(self.name, event, payload)

    def comment_event(self, event: str, payload: Mapping[str, Any]) -> CommentEvent | None:
        return comment_event(self.name, event, payload)

    def head_ref(self, number: int, head_branch: str) -> str:
        return f"refs/pull/{int(number)}/head"

    def default_api_url(self, base: str, host: str) -> str:
        return "https://api.github.com" if host == "github.com" else f"{base}/api/v3"

    def client(self, api_url: str, project: str, number: int, token: Callable[[], str], *,
               sleep: Callable[[float], None], outbound: OutboundPolicy) -> ProviderClient:
        owner, repo = owner_repo(self.name, project)
        return GitHub(api_url, owner, repo, number, token(), sleep=sleep, outbound=outbound)

    def lister(self, api_url: str, project: str, token: Callable[[], str], *, outbound: OutboundPolicy,
               limits: PollLimits, sleep: Callable[[float], None]) -> PullRequestLister:
        owner, repo = owner_repo(self.name, project)
        return GitHubPulls(self.name, poll_http(api_url, _headers(token()), limits, sleep, outbound), owner, repo,
                           project, limits)


PROVIDER: GitProvider = GitHubProvider()
