"""Bitbucket Cloud (bitbucket.org; docs/architecture.md §11.1, §11.3).

- Webhooks: `X-Event-Key` with `X-Hook-UUID` (what tells Cloud from Data Center, which sends the same event
  header without it), delivery id `X-Request-UUID`; signed `X-Hub-Signature: sha256=<hex HMAC-SHA256 of the body>`
  (the webhook's secret; a hook without one sends no signature and is refused).
- `pullrequest:created` → opened, `pullrequest:updated` → updated (Bitbucket sends it for a new head and for a
  changed title alike: the same head changes no plan), `pullrequest:fulfilled` → merged, `pullrequest:rejected`
  → closed; `pullrequest:comment_created` is a comment. Bitbucket has no pull request labels: a fork is approved
  by a `/burrito-py approve` comment only. A fork (`from_fork`): `pullrequest.source.repository` against
  `destination.repository` (by `uuid`, else `full_name`); a payload that does not say is one. Its commit hashes
  are short (12 hex digits): the mirror resolves them.
- Logins are account ids (`557058:…`): a user's `nickname` is not unique, so approvers and `commands.allowed`
  name the `account_id` (the webhook's `actor.account_id`).
- Pushes (`repo:push`) are not read: their branches are under `push.changes[].new.name`, not the `ref` a push
  delivery is read by; the repository's poll finds them.
- Heads: Bitbucket Cloud publishes no pull request ref. The head is fetched as the source branch,
  `refs/heads/<branch>`, from the base repository: a fork's head is in the fork, which is never fetched (its URL
  comes from whoever opened the pull request), so a fork's pull request fails to fetch with "the head … is not in
  …" even when approved.
- Comments assumed up to 32,768 characters (Bitbucket documents none: `spec.pullRequests.commentLimit` says
  otherwise).
- API 2.0 (https://api.bitbucket.org/2.0), a Bearer token (a repository, project or workspace access token):
  `GET/POST /repositories/{ws}/{repo}/pullrequests/{id}/comments`, `PUT …/comments/{comment id}`,
  `POST /repositories/{ws}/{repo}/commit/{sha}/statuses/build` (INPROGRESS, SUCCESSFUL, FAILED; its `key` is at
  most 40 characters: a longer context is keyed by its digest, its `name` is the context),
  `GET /workspaces/{ws}/permissions/repositories/{repo}?q=user.account_id="…"` (effective permissions: a
  workspace admin's token), `GET /repositories/{ws}/{repo}/pullrequests/{id}` (author, participants).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from burrito_py.gitproviders.base import (
    Action,
    CommentEvent,
    Detected,
    GitProvider,
    PullRequestEvent,
    field_of,
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

__all__ = ["COMMENT_LIMIT", "PROVIDER", "BitbucketCloud", "BitbucketCloudProvider", "from_fork", "status_key"]

COMMENT_LIMIT = 32_768
KEY_LIMIT = 40  # a build status's `key`
_ACTIONS: dict[str, Action] = {"pullrequest:created": "opened", "pullrequest:updated": "updated",
                               "pullrequest:fulfilled": "merged", "pullrequest:rejected": "closed"}
_STATES = {"OPEN": "open", "MERGED": "merged", "DECLINED": "closed", "SUPERSEDED": "closed"}
_STATUS = {"pending": "INPROGRESS", "success": "SUCCESSFUL", "failure": "FAILED"}
WRITE_PERMISSIONS = frozenset({"write", "admin"})


def _user(value: Any) -> str:
    """A Bitbucket Cloud user's login here: its `account_id` (unique), else its `uuid`; "" when neither."""
    if not isinstance(value, Mapping):
        return ""
    return next((str(value[k]) for k in ("account_id", "uuid") if isinstance(value.get(k), str) and value[k]), "")


def from_fork(pull_request: Mapping[str, Any]) -> bool:
    """Whether the source repository is another than the destination: only one the payload shows to be the
    destination (same `uuid`, else same `full_name`) is not a fork; a missing one (a deleted fork) is."""
    ends = [(pull_request.get(end) or {}).get("repository") if isinstance(pull_request.get(end), Mapping) else None
            for end in ("source", "destination")]
    source, destination = ends
    if not isinstance(source, Mapping) or not isinstance(destination, Mapping):
        return True
    for key in ("uuid", "full_name"):
        s, d = source.get(key), destination.get(key)
        if isinstance(s, str) and isinstance(d, str) and s and d:
            return s != d
    return True


def status_key(context: str) -> str:
    """A build status's `key` for `context`: itself when it fits Bitbucket's 40 characters, else a digest of it
    (one context, one key, always the same)."""
    if len(context) <= KEY_LIMIT:
        return context
    return "burrito-py-" + hashlib.sha256(context.encode()).hexdigest()[:KEY_LIMIT - 11]


def _workspace_repo(project: str) -> tuple[str, str]:
    workspace, _, repo = project.strip("/").partition("/")
    if not workspace or not repo or "/" in repo:
        raise ValueError(f"bitbucket project {project!r} is not workspace/repository")
    return workspace, repo


@dataclass
class BitbucketCloud:
    """Bitbucket Cloud's REST API 2.0 (`api_url` https://api.bitbucket.org/2.0)."""

    api_url: str
    workspace: str
    repo: str
    number: int
    token: str = field(repr=False)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    outbound: OutboundPolicy = field(default_factory=OutboundPolicy, repr=False)
    web_url: str = "https://bitbucket.org"  # where a status links when it is given no URL (Bitbucket requires one)
    http: ApiHttp = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.http = ApiHttp(self.api_url, {"Authorization": f"Bearer {self.token}", "Accept": "application/json"},
                            sleep=self.sleep, outbound=self.outbound)

    @property
    def calls(self) -> int:
        return self.http.calls

    def close(self) -> None:
        self.http.close()

    def _repo(self) -> str:
        return f"{self.api_url.rstrip('/')}/repositories/{quote(self.workspace, safe='')}/{quote(self.repo, safe='')}"

    def _pr(self) -> str:
        return f"{self._repo()}/pullrequests/{int(self.number)}"

    def _pages(self, url: str, what: str, params: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Every value of a paged answer, following its `next` (to the API's own origin only, `ApiHttp`)."""
        found: list[dict[str, Any]] = []
        next_url: str | None = url
        while next_url is not None:
            response = self.http.request("GET", next_url, what, params=params if next_url == url else None)
            page = response.json()
            found.extend(v for v in page.get("values") or () if isinstance(v, dict))
            next_url = page.get("next") if isinstance(page.get("next"), str) else None
        return found

    def list_comments(self) -> dict[str, str]:
        return {str(c["id"]): str((c.get("content") or {}).get("raw") or "")
                for c in self._pages(f"{self._pr()}/comments", "listing the pull request's comments",
                                     {"pagelen": "100"}) if not c.get("deleted")}

    def create_comment(self, body: str) -> str:
        response = self.http.request("POST", f"{self._pr()}/comments", "creating the comment",
                                     json={"content": {"raw": body}})
        return str(response.json()["id"])

    def edit_comment(self, comment_id: str, body: str) -> None:
        self.http.request("PUT", f"{self._pr()}/comments/{quote(comment_id, safe='')}", "editing the comment",
                          json={"content": {"raw": body}})

    def set_status(self, sha: str, status: CommitStatus, target_url: str | None) -> None:
        url = target_url or f"{self.web_url.rstrip('/')}/{quote(self.workspace, safe='')}/" \
                            f"{quote(self.repo, safe='')}/pull-requests/{int(self.number)}"
        payload = {"key": status_key(status.context), "state": _STATUS[status.state], "name": status.context,
                   "description": status.description, "url": url}
        self.http.request("POST", f"{self._repo()}/commit/{quote(sha, safe='')}/statuses/build",
                          f"status {status.context}", json=payload)

    def write_permission(self, login: str, user_id: int | None) -> bool:
        """The workspace's effective permission of account `login` on the repository: write or admin. The query
        is filtered by the API and the answer matched here too (an account not listed has none)."""
        query = f"user.account_id={json.dumps(login)}"
        try:
            values = self._pages(f"{self.api_url.rstrip('/')}/workspaces/{quote(self.workspace, safe='')}/"
                                 f"permissions/repositories/{quote(self.repo, safe='')}",
                                 f"asking {login}'s permission", {"q": query, "pagelen": "100"})
        except ProviderError as exc:
            if exc.status == 404:
                return False
            raise
        return any(_user(v.get("user")) == login and str(v.get("permission") or "") in WRITE_PERMISSIONS
                   for v in values)

    def review_facts(self, base: str, head: str) -> ReviewFacts:
        """The pull request's author and the participants who approve it now (`participants[].approved`).
        Bitbucket Cloud's API says neither whether it can merge nor how far it is behind: both None, so an
        apply requirement on them is not met."""
        pull = self.http.request("GET", self._pr(), "reading the pull request").json()
        approved = approvers_with_write((_user(p.get("user")) for p in pull.get("participants") or ()
                                         if isinstance(p, Mapping) and p.get("approved") is True),
                                        lambda login: self.write_permission(login, None))
        return ReviewFacts(_user(pull.get("author")), approved, None, None)


class BitbucketCloudProvider:
    name = "bitbucket"
    event_header = "X-Event-Key"
    push_events: frozenset[str] = frozenset()  # `repo:push` is not read (the module's docstring)
    comment_limit = COMMENT_LIMIT
    github_app = False

    def detect(self, headers: Mapping[str, str]) -> Detected | None:
        if "x-event-key" not in headers or "x-hook-uuid" not in headers:
            return None
        return headers["x-event-key"], headers.get("x-request-uuid")

    def signature_valid(self, headers: Mapping[str, str], body: bytes, key: bytes) -> bool:
        given = headers.get("x-hub-signature", "")
        expected = "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(given.encode(), expected.encode())

    def repository_urls(self, payload: Mapping[str, Any]) -> list[str]:
        """The repository's web page (`repository.links.html.href`), which names it as its clone URLs do."""
        repository = payload.get("repository")
        links = repository.get("links") if isinstance(repository, Mapping) else None
        html = links.get("html") if isinstance(links, Mapping) else None
        href = html.get("href") if isinstance(html, Mapping) else None
        return [href] if isinstance(href, str) else []

    def pull_request_event(self, event: str, payload: Mapping[str, Any]) -> PullRequestEvent | None:
        kind = _ACTIONS.get(event)
        if kind is None:
            return None
        pull = payload.get("pullrequest") or {}
        links = pull.get("links") if isinstance(pull, Mapping) else None
        html = links.get("html") if isinstance(links, Mapping) else None
        return PullRequestEvent(self.name, kind, field_of(payload, "pullrequest.id", int),
                                field_of(payload, "pullrequest.destination.branch.name", str),
                                field_of(payload, "pullrequest.source.branch.name", str),
                                field_of(payload, "pullrequest.source.commit.hash", str),
                                str(pull.get("title") or ""),
                                str(html.get("href") or "") if isinstance(html, Mapping) else "",
                                field_of(payload, "repository.full_name", str),
                                time_of(payload, "pullrequest.updated_on"), from_fork=from_fork(pull),
                                author=_user(pull.get("author")), sender=_user(payload.get("actor")))

    def comment_event(self, event: str, payload: Mapping[str, Any]) -> CommentEvent | None:
        """`pullrequest:comment_created` (edits and deletions have their own events, not read)."""
        if event != "pullrequest:comment_created":
            return None
        comment = payload.get("comment") or {}
        pull = payload.get("pullrequest") or {}
        source = pull.get("source") if isinstance(pull, Mapping) else None
        commit = source.get("commit") if isinstance(source, Mapping) else None
        head = commit.get("hash") if isinstance(commit, Mapping) else None
        return CommentEvent(self.name, field_of(payload, "pullrequest.id", int),
                            str(field_of(payload, "comment.id", int)), field_of(payload, "comment.content.raw", str),
                            _user(payload.get("actor")) or _user(comment.get("user")),
                            field_of(payload, "repository.full_name", str),
                            time_of(payload, "comment.created_on") if comment.get("created_on") else "", None,
                            _STATES.get(str(pull.get("state") or ""), ""), head if isinstance(head, str) else "")

    def head_ref(self, number: int, head_branch: str) -> str:
        if not head_branch:
            raise ValueError(f"bitbucket pull request #{int(number)}: no source branch to fetch its head from")
        return f"refs/heads/{head_branch}"

    def default_api_url(self, base: str, host: str) -> str:
        return "https://api.bitbucket.org/2.0" if host == "bitbucket.org" else f"{base}/2.0"

    def client(self, api_url: str, project: str, number: int, token: Callable[[], str], *,
               sleep: Callable[[float], None], outbound: OutboundPolicy) -> ProviderClient:
        workspace, repo = _workspace_repo(project)
        return BitbucketCloud(api_url, workspace, repo, number, token(), sleep=sleep, outbound=outbound)


PROVIDER: GitProvider = BitbucketCloudProvider()
