"""Bitbucket Data Center (and Server; docs/architecture.md §11.1, §11.3): provider `bitbucket-datacenter`.

- Webhooks: `X-Event-Key` without Bitbucket Cloud's `X-Hook-UUID`, delivery id `X-Request-Id`; signed
  `X-Hub-Signature: sha256=<hex HMAC-SHA256 of the body>` (the webhook's secret; a hook without one sends none and
  is refused).
- `pr:opened` → opened, `pr:from_ref_updated` → updated, `pr:merged` → merged, `pr:declined` and `pr:deleted` →
  closed; `pr:comment:added` is a comment (a reply too). No labels: a fork is approved by comment only. A fork:
  `pullRequest.fromRef.repository` against `toRef.repository` (by `id` when either has one, else project key
  and slug); a payload that does not say is one. Times are epoch milliseconds (`updatedDate`, `createdDate`).
- Logins are user `name`s (unique on an instance). The repository's URLs are its `links.clone` and `links.self`
  hrefs (`toRef.repository`, else `repository`); a payload without them names no repository (202 "ignored").
- Pushes (`repo:refs_changed`) are not read: their branches are under `changes[]`, not the `ref` a push delivery
  is read by; the repository's poll finds them.
- Heads at `refs/pull-requests/<id>/from` (forks' too: the instance publishes it in the target repository).
- Comments assumed up to 32,768 characters (an instance setting; `spec.pullRequests.commentLimit` says otherwise).
- API (`api_url` `https://<host>/rest`), a Bearer HTTP access token: REST 1.0 under `api/1.0/projects/{key}/repos/
  {slug}/pull-requests/{id}`: the comments from its `activities` (COMMENTED, ADDED; the current text), `POST
  comments`, `PUT comments/{id}` with the comment's `version` (read first: Bitbucket refuses an edit of another
  version), the pull request (author, reviewers' `approved`), `merge` (`canMerge`), the commits of the base the
  head lacks (`commits?since=<head>&until=<base>`); build statuses `POST build-status/1.0/commits/{sha}`
  (INPROGRESS, SUCCESSFUL, FAILED; a URL always). Write permission: the user's explicit grant on the repository
  (`REPO_WRITE`, `REPO_ADMIN`) or its project (`PROJECT_WRITE`, `PROJECT_ADMIN`), read with a token that may
  administer them; a grant through a group or a global permission is not seen (the user is refused).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from burrito_py.gitproviders.base import (
    Action,
    BadPullRequest,
    CommentEvent,
    Detected,
    GitProvider,
    PullRequestEvent,
    field_of,
    login_of,
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
from burrito_py.timeutil import format_time_precise

__all__ = ["COMMENT_LIMIT", "PROVIDER", "BitbucketDataCenter", "BitbucketDataCenterProvider", "from_fork",
           "millis_of"]

COMMENT_LIMIT = 32_768
_ACTIONS: dict[str, Action] = {"pr:opened": "opened", "pr:from_ref_updated": "updated", "pr:merged": "merged",
                               "pr:declined": "closed", "pr:deleted": "closed"}
_STATES = {"OPEN": "open", "MERGED": "merged", "DECLINED": "closed"}
_STATUS = {"pending": "INPROGRESS", "success": "SUCCESSFUL", "failure": "FAILED"}
WRITE_PERMISSIONS = frozenset({"REPO_WRITE", "REPO_ADMIN", "PROJECT_WRITE", "PROJECT_ADMIN"})


def millis_of(payload: Mapping[str, Any], dotted: str) -> str:
    """An epoch-milliseconds time as RFC 3339 UTC; BadPullRequest names the field when it is not one."""
    value = field_of(payload, dotted, int)
    try:
        return format_time_precise(datetime.fromtimestamp(value / 1000, UTC))
    except (OverflowError, OSError, ValueError):
        raise BadPullRequest(f"{dotted}: {value} is not a time in milliseconds") from None


def _repository_key(repository: Mapping[str, Any]) -> str | None:
    project = repository.get("project")
    key = project.get("key") if isinstance(project, Mapping) else None
    slug = repository.get("slug")
    return f"{key}/{slug}" if isinstance(key, str) and isinstance(slug, str) and key and slug else None


def from_fork(pull_request: Mapping[str, Any]) -> bool:
    """Whether `fromRef`'s repository is another than `toRef`'s: only one the payload shows to be the same (same
    `id`, else same project key and slug) is not a fork."""
    ends = [(pull_request.get(end) or {}).get("repository") if isinstance(pull_request.get(end), Mapping) else None
            for end in ("fromRef", "toRef")]
    source, target = ends
    if not isinstance(source, Mapping) or not isinstance(target, Mapping):
        return True
    ids = [r.get("id") for r in (source, target)]
    if any(i is not None for i in ids):  # when either has an id, both must have the same one
        return not all(isinstance(i, int) and not isinstance(i, bool) for i in ids) or ids[0] != ids[1]
    s_key, t_key = _repository_key(source), _repository_key(target)
    return s_key is None or t_key is None or s_key != t_key


def _project(payload: Mapping[str, Any]) -> str:
    """`PROJECT/slug` of the pull request's target repository; BadPullRequest naming the field when missing."""
    return (f"{field_of(payload, 'pullRequest.toRef.repository.project.key', str)}/"
            f"{field_of(payload, 'pullRequest.toRef.repository.slug', str)}")


def _project_repo(project: str) -> tuple[str, str]:
    key, _, slug = project.strip("/").partition("/")
    if not key or not slug or "/" in slug:
        raise ValueError(f"bitbucket-datacenter project {project!r} is not PROJECT/repository")
    return key, slug


@dataclass
class BitbucketDataCenter:
    """Bitbucket Data Center's REST APIs (`api_url` https://bitbucket.example/rest)."""

    api_url: str
    project_key: str
    slug: str
    number: int
    token: str = field(repr=False)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    outbound: OutboundPolicy = field(default_factory=OutboundPolicy, repr=False)
    http: ApiHttp = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.http = ApiHttp(self.api_url, {"Authorization": f"Bearer {self.token}", "Accept": "application/json"},
                            sleep=self.sleep, outbound=self.outbound)

    @property
    def calls(self) -> int:
        return self.http.calls

    def close(self) -> None:
        self.http.close()

    def _rest(self) -> str:
        return self.api_url.rstrip("/")

    def _repo(self) -> str:
        return (f"{self._rest()}/api/1.0/projects/{quote(self.project_key, safe='')}/repos/"
                f"{quote(self.slug, safe='')}")

    def _pr(self) -> str:
        return f"{self._repo()}/pull-requests/{int(self.number)}"

    def _pages(self, url: str, what: str, params: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        """Every value of a paged answer (`isLastPage`, `nextPageStart`)."""
        found: list[dict[str, Any]] = []
        start = 0
        while True:
            page = self.http.request("GET", url, what, params={**(params or {}), "start": str(start),
                                                                "limit": "100"}).json()
            found.extend(v for v in page.get("values") or () if isinstance(v, dict))
            following = page.get("nextPageStart")
            if page.get("isLastPage", True) or not isinstance(following, int) or following <= start:
                return found
            start = following

    def list_comments(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for activity in self._pages(f"{self._pr()}/activities", "listing the pull request's comments"):
            comment = activity.get("comment")
            if activity.get("action") == "COMMENTED" and isinstance(comment, Mapping) and "id" in comment:
                found[str(comment["id"])] = str(comment.get("text") or "")
        return found

    def create_comment(self, body: str) -> str:
        response = self.http.request("POST", f"{self._pr()}/comments", "creating the comment", json={"text": body})
        return str(response.json()["id"])

    def edit_comment(self, comment_id: str, body: str) -> None:
        url = f"{self._pr()}/comments/{quote(comment_id, safe='')}"
        version = self.http.request("GET", url, "reading the comment's version").json().get("version")
        self.http.request("PUT", url, "editing the comment", json={"text": body, "version": version})

    def set_status(self, sha: str, status: CommitStatus, target_url: str | None) -> None:
        url = target_url or (f"{self._rest().removesuffix('/rest')}/projects/{quote(self.project_key, safe='')}/"
                             f"repos/{quote(self.slug, safe='')}/pull-requests/{int(self.number)}")
        payload = {"state": _STATUS[status.state], "key": status.context, "name": status.context,
                   "description": status.description, "url": url}
        self.http.request("POST", f"{self._rest()}/build-status/1.0/commits/{quote(sha, safe='')}",
                          f"status {status.context}", json=payload)

    def write_permission(self, login: str, user_id: int | None) -> bool:
        """`login`'s explicit grant on the repository, else on its project (the module's docstring)."""
        project = f"{self._rest()}/api/1.0/projects/{quote(self.project_key, safe='')}"
        for url in (f"{self._repo()}/permissions/users", f"{project}/permissions/users"):
            try:
                values = self._pages(url, f"asking {login}'s permission", {"filter": login})
            except ProviderError as exc:
                if exc.status == 404:
                    return False
                raise
            if any(login_of(v.get("user"), "name") == login and v.get("permission") in WRITE_PERMISSIONS
                   for v in values):
                return True
        return False

    def review_facts(self, base: str, head: str) -> ReviewFacts:
        """The pull request (author, reviewers who approve), `merge` (`canMerge`; a conflict or a veto is False),
        and the commits of `base` that `head` lacks."""
        pull = self.http.request("GET", self._pr(), "reading the pull request").json()
        approved = approvers_with_write((login_of(r.get("user"), "name") for r in pull.get("reviewers") or ()
                                         if isinstance(r, Mapping) and r.get("approved") is True),
                                        lambda login: self.write_permission(login, None))
        merge = self.http.request("GET", f"{self._pr()}/merge", "asking whether it can merge").json()
        can_merge = merge.get("canMerge")
        behind = self._pages(f"{self._repo()}/commits", "comparing the head with the base",
                             {"since": head, "until": base})
        return ReviewFacts(login_of((pull.get("author") or {}).get("user"), "name"), approved,
                           can_merge if isinstance(can_merge, bool) else None, len(behind))


class BitbucketDataCenterProvider:
    name = "bitbucket-datacenter"
    event_header = "X-Event-Key"
    push_events: frozenset[str] = frozenset()  # `repo:refs_changed` is not read (the module's docstring)
    comment_limit = COMMENT_LIMIT
    github_app = False

    def detect(self, headers: Mapping[str, str]) -> Detected | None:
        if "x-event-key" not in headers or "x-hook-uuid" in headers:  # the latter: Bitbucket Cloud's
            return None
        return headers["x-event-key"], headers.get("x-request-id")

    def signature_valid(self, headers: Mapping[str, str], body: bytes, key: bytes) -> bool:
        given = headers.get("x-hub-signature", "")
        expected = "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(given.encode(), expected.encode())

    def repository_urls(self, payload: Mapping[str, Any]) -> list[str]:
        pull = payload.get("pullRequest")
        target = (pull.get("toRef") or {}).get("repository") if isinstance(pull, Mapping) and isinstance(
            pull.get("toRef"), Mapping) else None
        repository = target if isinstance(target, Mapping) else payload.get("repository")
        links = repository.get("links") if isinstance(repository, Mapping) else None
        urls = [link["href"] for kind in ("clone", "self") for link in
                ((links.get(kind) or ()) if isinstance(links, Mapping) else ())
                if isinstance(link, Mapping) and isinstance(link.get("href"), str)]
        return list(dict.fromkeys(urls))

    def pull_request_event(self, event: str, payload: Mapping[str, Any]) -> PullRequestEvent | None:
        kind = _ACTIONS.get(event)
        if kind is None:
            return None
        pull = payload.get("pullRequest") or {}
        links = pull.get("links") if isinstance(pull, Mapping) else None
        selves = links.get("self") if isinstance(links, Mapping) else None
        url = selves[0].get("href") if isinstance(selves, list) and selves and isinstance(selves[0], Mapping) else ""
        return PullRequestEvent(self.name, kind, field_of(payload, "pullRequest.id", int),
                                field_of(payload, "pullRequest.toRef.displayId", str),
                                field_of(payload, "pullRequest.fromRef.displayId", str),
                                field_of(payload, "pullRequest.fromRef.latestCommit", str),
                                str(pull.get("title") or ""), str(url or ""), _project(payload),
                                millis_of(payload, "pullRequest.updatedDate"), from_fork=from_fork(pull),
                                author=login_of((pull.get("author") or {}).get("user"), "name"),
                                sender=login_of(payload.get("actor"), "name"))

    def comment_event(self, event: str, payload: Mapping[str, Any]) -> CommentEvent | None:
        """`pr:comment:added` (edits and deletions are their own events, not read)."""
        if event != "pr:comment:added":
            return None
        pull = payload.get("pullRequest") or {}
        comment = payload.get("comment") or {}
        source = pull.get("fromRef") if isinstance(pull, Mapping) else None
        head = source.get("latestCommit") if isinstance(source, Mapping) else None
        user = payload.get("actor") if isinstance(payload.get("actor"), Mapping) else comment.get("author")
        user_id = user.get("id") if isinstance(user, Mapping) else None
        return CommentEvent(self.name, field_of(payload, "pullRequest.id", int),
                            str(field_of(payload, "comment.id", int)), field_of(payload, "comment.text", str),
                            login_of(user, "name"), _project(payload),
                            millis_of(payload, "comment.createdDate") if isinstance(comment, Mapping)
                            and comment.get("createdDate") is not None else "",
                            user_id if isinstance(user_id, int) and not isinstance(user_id, bool) else None,
                            _STATES.get(str(pull.get("state") or ""), ""), head if isinstance(head, str) else "")

    def head_ref(self, number: int, head_branch: str) -> str:
        return f"refs/pull-requests/{int(number)}/from"

    def default_api_url(self, base: str, host: str) -> str:
        return f"{base}/rest"

    def client(self, api_url: str, project: str, number: int, token: Callable[[], str], *,
               sleep: Callable[[float], None], outbound: OutboundPolicy) -> ProviderClient:
        key, slug = _project_repo(project)
        return BitbucketDataCenter(api_url, key, slug, number, token(), sleep=sleep, outbound=outbound)


PROVIDER: GitProvider = BitbucketDataCenterProvider()
