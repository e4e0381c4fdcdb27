"""GitLab (gitlab.com and self-managed; docs/architecture.md §11.1, §11.3).

- Webhooks: `X-Gitlab-Event`, delivery id `X-Gitlab-Event-UUID` (else `X-Gitlab-Webhook-UUID`); not signed: it
  sends the secret itself (`X-Gitlab-Token`), verified when `hmac_key(token)` equals the key, in constant time.
- `Merge Request Hook`: `open`/`reopen` → opened, `update` with `oldrev` (new commits) → updated, `update` with
  `changes.labels` → labeled (the labels added and removed, the sender `user.username`), `close`, `merge`; other
  actions (an `update` without new commits or labels, approvals) are None. A fork (`from_fork`):
  `source_project_id` against `target_project_id`; a payload that does not say is one.
- Heads at `refs/merge-requests/<iid>/head`; notes up to 1,000,000 characters.
- API v4 (`/api/v4`): `GET/POST /projects/{id}/merge_requests/{iid}/notes`, `PUT …/notes/{id}`,
  `POST /projects/{id}/statuses/{sha}`; `project` is the id or `group/subgroup/name`.
- Polling (§11.3): `GET /projects/{id}/merge_requests?state=opened` (`X-Next-Page` paging), `GET
  /projects/{id}/merge_requests/{iid}`; each merge request is put in the shape of a `Merge Request Hook`
  (`object_attributes`: `open`, `close` or `merge`) and read by `pull_request_event`, as its webhook would be.
"""

from __future__ import annotations

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
    hmac_key,
    login_of,
    repository_urls,
    time_of,
)
from burrito_py.gitproviders.client import ApiHttp, CommitStatus, ProviderClient, ProviderError, ReviewFacts
from burrito_py.gitproviders.github import as_list, poll_http
from burrito_py.outbound import OutboundPolicy

__all__ = ["COMMENT_LIMIT", "PROVIDER", "GitLab", "GitLabMergeRequests", "GitLabProvider", "from_fork"]

COMMENT_LIMIT = 1_000_000
_ACTIONS: dict[str, Action] = {"open": "opened", "reopen": "opened", "close": "closed", "merge": "merged"}
_STATES = {"opened": "open", "closed": "closed", "locked": "closed", "merged": "merged"}
DEVELOPER = 30  # the access level that may push and merge


def from_fork(attributes: Mapping[str, Any]) -> bool:
    """Whether a GitLab merge request comes from another project than its target (unknown: it does)."""
    source, target = attributes.get("source_project_id"), attributes.get("target_project_id")
    if not isinstance(source, int) or not isinstance(target, int) or isinstance(source, bool):
        return True
    return source != target


def _labels(payload: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(added, removed) label titles of a GitLab `update` (`changes.labels.previous/current`)."""
    changes = (payload.get("changes") or {}).get("labels") if isinstance(payload.get("changes"), Mapping) else None
    if not isinstance(changes, Mapping):
        return (), ()

    def titles(key: str) -> set[str]:
        items = changes.get(key)
        return {str(i["title"]) for i in items or () if isinstance(i, Mapping) and isinstance(i.get("title"), str)}

    before, after = titles("previous"), titles("current")
    return tuple(sorted(after - before)), tuple(sorted(before - after))


@dataclass
class GitLab:
    """GitLab's REST API v4 (`api_url` https://gitlab.com/api/v4); `project` is the id or `group/name`."""

    api_url: str
    project: str
    number: int  # the merge request's iid
    token: str = field(repr=False)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    outbound: OutboundPolicy = field(default_factory=OutboundPolicy, repr=False)
    http: ApiHttp = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.http = ApiHttp(self.api_url, {"PRIVATE-TOKEN": self.token}, sleep=self.sleep, outbound=self.outbound)

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

    def write_permission(self, login: str, user_id: int | None) -> bool:
        """`GET /projects/{id}/members/all/{user_id}` (inherited memberships too): Developer or above."""
        if user_id is None:
            return False
        try:
            response = self.http.request("GET", f"/projects/{quote(self.project, safe='')}/members/all/{int(user_id)}",
                                         f"asking {login}'s membership")
        except ProviderError as exc:
            if exc.status == 404:
                return False
            raise
        level = response.json().get("access_level")
        return isinstance(level, int) and level >= DEVELOPER

    def review_facts(self, base: str, head: str) -> ReviewFacts:
        """The merge request (author, `detailed_merge_status`, `diverged_commits_count`) and its approvals."""
        mr = self.http.request("GET", self._mr(), "reading the merge request",
                               params={"include_diverged_commits_count": "true"}).json()
        approvals = self.http.request("GET", f"{self._mr()}/approvals", "reading the approvals").json()
        approved = tuple(sorted(login_of(a.get("user"), "username") for a in approvals.get("approved_by") or ()
                                if isinstance(a, Mapping) and login_of(a.get("user"), "username")))
        status = mr.get("detailed_merge_status") or mr.get("merge_status")
        mergeable = (None if status in (None, "checking", "unchecked", "preparing", "approvals_syncing")
                     else status in ("mergeable", "can_be_merged"))
        diverged = mr.get("diverged_commits_count")
        return ReviewFacts(login_of(mr.get("author"), "username"), approved, mergeable,
                           diverged if isinstance(diverged, int) and not isinstance(diverged, bool) else None)


_HOOK_ACTIONS = {"opened": "open", "closed": "close", "locked": "close", "merged": "merge"}


@dataclass
class GitLabMergeRequests:
    """One project's merge requests for a poll (§11.3), each read as its `Merge Request Hook` would be."""

    provider: GitLabProvider
    http: ApiHttp
    project: str
    limits: PollLimits

    @property
    def calls(self) -> int:
        return self.http.calls

    def close(self) -> None:
        self.http.close()

    def _mrs(self) -> str:
        return f"/projects/{quote(self.project, safe='')}/merge_requests"

    def _event(self, mr: Any) -> PullRequestEvent:
        """The hook's payload for merge request `mr` as the API gives it (the hook's `last_commit.id` is the API's
        `sha`, its `url` the `web_url`, its actor the author), read by the hook's own reading."""
        if not isinstance(mr, Mapping):
            raise BadPullRequest("merge request: not an object")
        action = _HOOK_ACTIONS.get(str(mr.get("state") or ""))
        if action is None:
            raise BadPullRequest(f"state: {str(mr.get('state'))[:40]!r} is not a merge request state")
        attributes = {"action": action, "iid": mr.get("iid"), "target_branch": mr.get("target_branch"),
                      "source_branch": mr.get("source_branch"), "last_commit": {"id": mr.get("sha")},
                      "title": mr.get("title"), "url": mr.get("web_url"), "updated_at": mr.get("updated_at"),
                      "source_project_id": mr.get("source_project_id"),
                      "target_project_id": mr.get("target_project_id")}
        payload = {"object_attributes": attributes, "project": {"path_with_namespace": self.project},
                   "user": mr.get("author")}
        event = self.provider.pull_request_event("Merge Request Hook", payload)
        if event is None:  # open, close and merge are always events
            raise BadPullRequest(f"merge request action {action!r} is not an event")
        return event

    def open_pull_requests(self) -> OpenPullRequests:
        events: list[PullRequestEvent] = []
        page: str | None = "1"
        for _ in range(self.limits.max_pages):
            if not page:
                return OpenPullRequests(tuple(events), True)
            response = self.http.request("GET", self._mrs(), "listing the open merge requests",
                                         params={"state": "opened", "per_page": self.limits.per_page, "page": page})
            events.extend(self._event(mr) for mr in as_list(response.json()))
            page = response.headers.get("X-Next-Page") or None
        return OpenPullRequests(tuple(events), not page)

    def pull_request(self, number: int) -> PullRequestEvent | None:
        try:
            mr = self.http.request("GET", f"{self._mrs()}/{int(number)}", f"reading merge request !{number}").json()
        except ProviderError as exc:
            if exc.status == 404:
                return None
            raise
        return self._event(mr)


class GitLabProvider:
    name = "gitlab"
    event_header = "X-Gitlab-Event"
    push_events = frozenset({"Push Hook"})
    comment_limit = COMMENT_LIMIT
    github_app = False

    def detect(self, headers: Mapping[str, str]) -> Detected | None:
        if "x-gitlab-event" not in headers:
            return None
        return headers["x-gitlab-event"], headers.get("x-gitlab-event-uuid") or headers.get("x-gitlab-webhook-uuid")

    def signature_valid(self, headers: Mapping[str, str], body: bytes, key: bytes) -> bool:
        token = headers.get("x-gitlab-token", "").encode()
        return hmac.compare_digest(hmac_key(token), key)

    def repository_urls(self, payload: Mapping[str, Any]) -> list[str]:
        return repository_urls(payload)

    def pull_request_event(self, event: str, payload: Mapping[str, Any]) -> PullRequestEvent | None:
        if event != "Merge Request Hook":
            return None
        attributes = payload.get("object_attributes") or {}
        action = field_of(payload, "object_attributes.action", str)
        added, removed = _labels(payload)
        if action == "update" and attributes.get("oldrev"):
            kind: Action = "updated"  # new commits: GitLab sends `oldrev` only then
            added, removed = (), ()
        elif action == "update" and (added or removed):
            kind = "labeled"
        elif action in _ACTIONS:
            kind = _ACTIONS[action]
        else:
            return None
        actor = login_of(payload.get("user"), "username")
        return PullRequestEvent(self.name, kind, field_of(payload, "object_attributes.iid", int),
                                field_of(payload, "object_attributes.target_branch", str),
                                field_of(payload, "object_attributes.source_branch", str),
                                field_of(payload, "object_attributes.last_commit.id", str),
                                str(attributes.get("title") or ""), str(attributes.get("url") or ""),
                                field_of(payload, "project.path_with_namespace", str),
                                time_of(payload, "object_attributes.updated_at"),
                                from_fork=from_fork(attributes),
                                author=actor if kind == "opened" else "", sender=actor, added=added, removed=removed)

    def comment_event(self, event: str, payload: Mapping[str, Any]) -> CommentEvent | None:
        """A `Note Hook` on a merge request: a note created (GitLab sends `action: create`, older versions none)."""
        if event != "Note Hook":
            return None
        attributes = payload.get("object_attributes")
        if not isinstance(attributes, Mapping) or attributes.get("noteable_type") != "MergeRequest":
            return None
        if attributes.get("action") not in (None, "create") or attributes.get("system"):
            return None
        mr = payload.get("merge_request") if isinstance(payload.get("merge_request"), Mapping) else {}
        assert isinstance(mr, Mapping)
        user = payload.get("user")
        user_id = user.get("id") if isinstance(user, Mapping) else None
        head = (mr.get("last_commit") or {}).get("id") if isinstance(mr.get("last_commit"), Mapping) else None
        return CommentEvent(self.name, field_of(payload, "merge_request.iid", int),
                            str(field_of(payload, "object_attributes.id", int)),
                            field_of(payload, "object_attributes.note", str), login_of(user, "username"),
                            field_of(payload, "project.path_with_namespace", str),
                            time_of(payload, "object_attributes.created_at") if attributes.get("created_at") else "",
                            user_id if isinstance(user_id, int) and not isinstance(user_id, bool) else None,
                            _STATES.get(str(mr.get("state") or ""), ""), head if isinstance(head, str) else "")

    def head_ref(self, number: int, head_branch: str) -> str:
        return f"refs/merge-requests/{int(number)}/head"

    def default_api_url(self, base: str, host: str) -> str:
        return f"{base}/api/v4"

    def client(self, api_url: str, project: str, number: int, token: Callable[[], str], *,
               sleep: Callable[[float], None], outbound: OutboundPolicy) -> ProviderClient:
        return GitLab(api_url, project.strip("/"), number, token(), sleep=sleep, outbound=outbound)

    def lister(self, api_url: str, project: str, token: Callable[[], str], *, outbound: OutboundPolicy,
               limits: PollLimits, sleep: Callable[[float], None]) -> PullRequestLister:
        return GitLabMergeRequests(self, poll_http(api_url, {"PRIVATE-TOKEN": token()}, limits, sleep, outbound),
                                   project.strip("/"), limits)


PROVIDER: GitProvider = GitLabProvider()
