"""Azure DevOps Services and Server (docs/architecture.md §11.1, §11.3): provider `azure-devops`.

- Webhooks are service hooks ("Web Hooks" consumer): no header names their event; the body does (`publisherId`
  `tfs`, `eventType`, `resource`), so the registry asks this provider only after every header-based one declined
  (`detect_body`). Delivery id: the body's `id` (the event's). They carry no signature: the hook's basic
  authentication (`Authorization: Basic …`, user and password set on the subscription) is its only proof, so the
  password is the repository's `webhookSecret`, verified when `hmac_key(password)` equals the key, in constant time
  (as GitLab's token); no or another authentication is refused. The user name is not checked.
- `git.pullrequest.created` → opened, `git.pullrequest.updated` → updated, or closed (`status` `abandoned`) or merged
  (`completed`), `git.pullrequest.merged` → merged once `completed`; `updatedAt` is the event's `createdDate`
  (a pull request has no update time). A fork: `resource.forkSource` present, or the source repository's id (from
  `forkSource.repository`) another than the target's; unknown: a fork. No labels: a fork is approved by comment.
- `ms.vss-code.git-pullrequest-comment-event`: a comment (a reply too); its id is `<thread>:<comment>` (comment ids
  count from 1 in each thread). Logins are `uniqueName`s.
- Pushes (`git.push`) are not read: their branches are under `resource.refUpdates`, not the `ref` a push delivery
  is read by; the repository's poll finds them.
- The repository's URLs: `resource.repository.remoteUrl`, `sshUrl`, `webUrl`. `project` is
  `<organization>/<project>/<repository>`, from `remoteUrl` (`https://dev.azure.com/<org>/<project>/_git/<repo>`).
- Heads fetched from `refs/pull/<id>/merge`, the merge the service keeps for each pull request (it publishes no
  head ref): the head (`lastMergeSourceCommit`) is its second parent, so it is in the mirror with it.
- Comments assumed up to 150,000 characters. API (`api_url` https://dev.azure.com, or the server's collection URL),
  a personal access token as basic authentication, `api-version=7.1`, under `/<org>/<project>/_apis/git/repositories/
  <repo>/pullRequests/<id>`: the comments are the first comment of each `threads` entry, `POST threads` (one comment,
  status active), `PATCH threads/{t}/comments/{c}`; statuses `POST statuses` (the pull request statuses API:
  `state` pending/succeeded/failed, `context {genre: burrito-py, name}`, `targetUrl`). Review facts: the pull
  request's `createdBy`, reviewers with `vote` 10 (approved), `mergeStatus` `succeeded`; how far behind: unknown
  (the API says no count), so `undiverged` is never met. **Write permission is not asked** (no one API call says it:
  it is a security namespace evaluation): a commenter is refused unless `commands.requireWritePermission: false`,
  and then `allowed` or the Kubernetes mapping decide.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from burrito_py.gitproviders.base import (
    Action,
    BadPullRequest,
    CommentEvent,
    Detected,
    GitProvider,
    PullRequestEvent,
    field_of,
    hmac_key,
    login_of,
    time_of,
)
from burrito_py.gitproviders.client import ApiHttp, CommitStatus, ProviderClient, ReviewFacts
from burrito_py.outbound import OutboundPolicy

__all__ = ["COMMENT_LIMIT", "PROVIDER", "AzureDevOps", "AzureDevOpsProvider", "from_fork", "project_of_url"]

COMMENT_LIMIT = 150_000
API_VERSION = "7.1"
PUBLISHER = "tfs"
COMMENT_EVENT = "ms.vss-code.git-pullrequest-comment-event"
_EVENTS = frozenset({"git.push", "git.pullrequest.created", "git.pullrequest.updated", "git.pullrequest.merged",
                     COMMENT_EVENT})
_STATES = {"active": "open", "completed": "merged", "abandoned": "closed"}
_STATUS = {"pending": "pending", "success": "succeeded", "failure": "failed"}
APPROVED = 10  # a reviewer's vote: approved (5: approved with suggestions, counted too)


def project_of_url(url: str) -> str | None:
    """`<org>/<project>/<repo>` of a `https://dev.azure.com/<org>/<project>/_git/<repo>` remote URL (or a server's
    `https://host/<collection>/<project>/_git/<repo>`), else None."""
    parts = [p for p in urlsplit(url).path.split("/") if p]
    if len(parts) >= 4 and parts[-2] == "_git":
        return "/".join([parts[-4], parts[-3], parts[-1]])
    return None


def from_fork(resource: Mapping[str, Any]) -> bool:
    """Whether the pull request's source is a fork: `forkSource` present; a payload without the target repository's
    id is one too."""
    target = resource.get("repository")
    if not isinstance(target, Mapping) or not isinstance(target.get("id"), str):
        return True
    return resource.get("forkSource") is not None


def _branch(ref: str) -> str:
    return ref.removeprefix("refs/heads/")


def _project(resource: Mapping[str, Any]) -> str:
    remote = field_of(resource, "repository.remoteUrl", str)
    project = project_of_url(remote)
    if project is None:
        raise BadPullRequest("resource.repository.remoteUrl: not an https://…/<project>/_git/<repository> URL")
    return project


@dataclass
class AzureDevOps:
    """The Azure DevOps REST API (`api_url` https://dev.azure.com) for one pull request."""

    api_url: str
    organization: str
    project: str
    repository: str
    number: int
    token: str = field(repr=False)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    outbound: OutboundPolicy = field(default_factory=OutboundPolicy, repr=False)
    http: ApiHttp = field(init=False, repr=False)

    def __post_init__(self) -> None:
        basic = base64.b64encode(f":{self.token}".encode()).decode()  # a PAT: any user name, the token as password
        self.http = ApiHttp(self.api_url, {"Authorization": f"Basic {basic}", "Accept": "application/json"},
                            sleep=self.sleep, outbound=self.outbound)

    @property
    def calls(self) -> int:
        return self.http.calls

    def close(self) -> None:
        self.http.close()

    def _pr(self) -> str:
        return (f"/{quote(self.organization, safe='')}/{quote(self.project, safe='')}/_apis/git/repositories/"
                f"{quote(self.repository, safe='')}/pullRequests/{int(self.number)}")

    def _params(self) -> dict[str, str]:
        return {"api-version": API_VERSION}

    def list_comments(self) -> dict[str, str]:
        threads = self.http.request("GET", f"{self._pr()}/threads", "listing the pull request's threads",
                                    params=self._params()).json()
        found: dict[str, str] = {}
        for thread in threads.get("value") or ():
            comments = thread.get("comments") if isinstance(thread, Mapping) else None
            first = comments[0] if isinstance(comments, list) and comments else None
            if isinstance(first, Mapping) and first.get("commentType") != "system" and "id" in thread:
                found[f"{thread['id']}:{first.get('id')}"] = str(first.get("content") or "")
        return found

    def create_comment(self, body: str) -> str:
        thread = self.http.request("POST", f"{self._pr()}/threads", "creating the comment", params=self._params(),
                                   json={"comments": [{"parentCommentId": 0, "content": body, "commentType": 1}],
                                         "status": 1}).json()
        return f"{thread['id']}:{thread['comments'][0]['id']}"

    def edit_comment(self, comment_id: str, body: str) -> None:
        thread, _, comment = comment_id.partition(":")
        self.http.request("PATCH", f"{self._pr()}/threads/{quote(thread, safe='')}/comments/"
                          f"{quote(comment or '1', safe='')}", "editing the comment", params=self._params(),
                          json={"content": body})

    def set_status(self, sha: str, status: CommitStatus, target_url: str | None) -> None:
        payload = {"state": _STATUS[status.state], "description": status.description,
                   "context": {"genre": "burrito-py", "name": status.context},
                   **({"targetUrl": target_url} if target_url else {})}
        self.http.request("POST", f"{self._pr()}/statuses", f"status {status.context}", params=self._params(),
                          json=payload)

    def write_permission(self, login: str, user_id: int | None) -> bool:
        """Not asked (the module's docstring): no commenter has write permission by this provider's answer."""
        return False

    def review_facts(self, base: str, head: str) -> ReviewFacts:
        pull = self.http.request("GET", self._pr(), "reading the pull request", params=self._params()).json()
        approved = tuple(sorted(login_of(r, "uniqueName") for r in pull.get("reviewers") or ()
                                if isinstance(r, Mapping) and isinstance(r.get("vote"), int)
                                and r["vote"] >= 5 and login_of(r, "uniqueName")))
        status = pull.get("mergeStatus")
        mergeable = None if status in (None, "notSet", "queued") else status == "succeeded"
        return ReviewFacts(login_of(pull.get("createdBy"), "uniqueName"), approved, mergeable, None)


class AzureDevOpsProvider:
    """Told by its body (`BodyDetecting`): it names no header."""

    name = "azure-devops"
    event_header = ""  # no header of its own: told by its body (detect_body)
    push_events: frozenset[str] = frozenset()  # `git.push` is not read (the module's docstring)
    comment_limit = COMMENT_LIMIT
    github_app = False

    def detect(self, headers: Mapping[str, str]) -> Detected | None:
        return None  # no header of its own: see detect_body

    def detect_body(self, headers: Mapping[str, str], payload: Mapping[str, Any]) -> Detected | None:
        """A service hook's body: `publisherId` tfs, a known `eventType` and a `resource` object."""
        event = payload.get("eventType")
        if payload.get("publisherId") != PUBLISHER or event not in _EVENTS or not isinstance(
                payload.get("resource"), Mapping):
            return None
        delivery = payload.get("id")
        return str(event), delivery if isinstance(delivery, str) else None

    def signature_valid(self, headers: Mapping[str, str], body: bytes, key: bytes) -> bool:
        """The hook's basic authentication: its password is the webhook secret (constant-time, through the same
        HMAC-key reduction as the key)."""
        password = _basic_password(headers.get("authorization", ""))
        return hmac.compare_digest(hmac_key(password if password is not None else b""), key) and (
            password is not None)

    def repository_urls(self, payload: Mapping[str, Any]) -> list[str]:
        resource = payload.get("resource")
        repository = resource.get("repository") if isinstance(resource, Mapping) else None
        if isinstance(resource, Mapping) and not isinstance(repository, Mapping):  # a comment event
            pull = resource.get("pullRequest")
            repository = pull.get("repository") if isinstance(pull, Mapping) else None
        if not isinstance(repository, Mapping):
            return []
        urls = [repository[k] for k in ("remoteUrl", "sshUrl", "webUrl") if isinstance(repository.get(k), str)]
        return list(dict.fromkeys(urls))

    def pull_request_event(self, event: str, payload: Mapping[str, Any]) -> PullRequestEvent | None:
        if event not in ("git.pullrequest.created", "git.pullrequest.updated", "git.pullrequest.merged"):
            return None
        resource = payload.get("resource") or {}
        state = _STATES.get(str(resource.get("status") or ""))
        if event == "git.pullrequest.created":
            kind: Action = "opened"
        elif state == "merged":
            kind = "merged"
        elif event == "git.pullrequest.merged":
            return None  # a merge attempted, not completed (a conflict): nothing changes
        elif state == "closed":
            kind = "closed"
        else:
            kind = "updated"
        links = resource.get("_links") if isinstance(resource, Mapping) else None
        web = links.get("web") if isinstance(links, Mapping) else None
        return PullRequestEvent(self.name, kind, field_of(payload, "resource.pullRequestId", int),
                                _branch(field_of(payload, "resource.targetRefName", str)),
                                _branch(field_of(payload, "resource.sourceRefName", str)),
                                field_of(payload, "resource.lastMergeSourceCommit.commitId", str),
                                str(resource.get("title") or ""),
                                str(web.get("href") or "") if isinstance(web, Mapping) else "",
                                _project(resource), time_of(payload, "createdDate"), from_fork=from_fork(resource),
                                author=login_of(resource.get("createdBy"), "uniqueName"),
                                sender=login_of(resource.get("createdBy"), "uniqueName") if kind == "opened" else "")

    def comment_event(self, event: str, payload: Mapping[str, Any]) -> CommentEvent | None:
        if event != COMMENT_EVENT:
            return None
        resource = payload.get("resource") or {}
        comment = resource.get("comment") if isinstance(resource, Mapping) else None
        pull = resource.get("pullRequest") if isinstance(resource, Mapping) else None
        if not isinstance(comment, Mapping) or not isinstance(pull, Mapping):
            return None
        if comment.get("commentType") == "system":
            return None
        links = comment.get("_links")
        href = ((links.get("threads") or links.get("self") or {}).get("href") if isinstance(links, Mapping) else None)
        found = re.search(r"/threads/(\d+)", href) if isinstance(href, str) else None
        if found is None:
            raise BadPullRequest("resource.comment._links.threads.href: missing or names no thread")
        author = comment.get("author")
        head = (pull.get("lastMergeSourceCommit") or {}).get("commitId") if isinstance(
            pull.get("lastMergeSourceCommit"), Mapping) else None
        return CommentEvent(self.name, field_of(payload, "resource.pullRequest.pullRequestId", int),
                            f"{found.group(1)}:{field_of(payload, 'resource.comment.id', int)}",
                            field_of(payload, "resource.comment.content", str), login_of(author, "uniqueName"),
                            _project(pull),
                            time_of(payload, "resource.comment.publishedDate") if comment.get("publishedDate")
                            else "", None, _STATES.get(str(pull.get("status") or ""), ""),
                            head if isinstance(head, str) else "")

    def head_ref(self, number: int, head_branch: str) -> str:
        return f"refs/pull/{int(number)}/merge"

    def default_api_url(self, base: str, host: str) -> str:
        return "https://dev.azure.com" if host in ("dev.azure.com", "ssh.dev.azure.com") else base

    def client(self, api_url: str, project: str, number: int, token: Callable[[], str], *,
               sleep: Callable[[float], None], outbound: OutboundPolicy) -> ProviderClient:
        parts = project.strip("/").split("/")
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"azure-devops project {project!r} is not organization/project/repository")
        return AzureDevOps(api_url, parts[0], parts[1], parts[2], number, token(), sleep=sleep, outbound=outbound)


def _basic_password(header: str) -> bytes | None:
    """The password of a `Basic` authorization header; None when there is none or it is not one."""
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic" or not value:
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    _user, colon, password = decoded.partition(b":")
    return password if colon else None


PROVIDER: GitProvider = AzureDevOpsProvider()
