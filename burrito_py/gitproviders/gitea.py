"""Gitea and Forgejo (docs/architecture.md §11.1, §11.3): GitHub's shapes with its own headers.

- Webhooks: `X-Gitea-Event`, `X-Gitea-Delivery`; signed `X-Gitea-Signature: <hex HMAC-SHA256 of the body>`. It
  also sends `X-GitHub-Event`: the registry asks it before GitHub (`registry.py`).
- `pull_request`: as GitHub's (`github.pull_request_event`, forks told the same way), `synchronized` → updated,
  `label_updated`/`label_cleared` → labeled with every label it has now.
- Heads at `refs/pull/<n>/head`; comments assumed up to 65,536 characters (an instance setting: the repository's
  `spec.pullRequests.commentLimit` says otherwise).
- API `/api/v1`: GitHub's routes, `token` authorization and `page`/`limit` paging; polling (§11.3) lists
  `GET /repos/{o}/{r}/pulls?state=open` a page of 50 at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from burrito_py.gitproviders import github
from burrito_py.gitproviders.base import (
    CommentEvent,
    Detected,
    GitProvider,
    OpenPullRequests,
    PollLimits,
    PullRequestEvent,
    PullRequestLister,
    repository_urls,
)
from burrito_py.gitproviders.client import ApiHttp, ProviderClient
from burrito_py.outbound import OutboundPolicy

__all__ = ["COMMENT_LIMIT", "PROVIDER", "Gitea", "GiteaProvider", "GiteaPulls"]

COMMENT_LIMIT = 65_536  # Gitea's is a setting of the instance; this is the default we assume


@dataclass
class Gitea(github.GitHub):
    """Gitea's REST API (`api_url` https://gitea.example/api/v1): GitHub's routes, `token` authorization."""

    def __post_init__(self) -> None:
        self.http = ApiHttp(self.api_url, _headers(self.token), sleep=self.sleep, outbound=self.outbound)

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

    def _reviews(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        page = 1
        while True:
            response = self.http.request("GET", f"{self._repo()}/pulls/{self.number}/reviews",
                                         "listing the pull request's reviews", params={"page": page, "limit": 50})
            items = [r for r in response.json() if isinstance(r, dict)]
            found.extend(r for r in items if not r.get("dismissed"))
            if len(items) < 50:
                return found
            page += 1

    def _behind(self, base: str, head: str, pull: Mapping[str, Any]) -> int | None:
        """Gitea's pull request names its merge base and the base's tip: the head contains the base when they are
        the same commit (it says no count: 1 stands for "behind")."""
        merge_base = pull.get("merge_base")
        tip = (pull.get("base") or {}).get("sha") if isinstance(pull.get("base"), Mapping) else None
        if not isinstance(merge_base, str) or not isinstance(tip, str) or not merge_base or not tip:
            return None
        return 0 if merge_base == tip else 1


PAGE = 50  # Gitea's default largest page (`MAX_RESPONSE_ITEMS`)


class GiteaPulls(github.GitHubPulls):
    """GitHub's reading of each pull request; Gitea's `page`/`limit` paging."""

    def open_pull_requests(self) -> OpenPullRequests:
        events: list[PullRequestEvent] = []
        for page in range(1, self.limits.max_pages + 1):
            response = self.http.request("GET", f"{self._repo()}/pulls", "listing the open pull requests",
                                         params={"state": "open", "page": page, "limit": PAGE})
            items = github.as_list(response.json())
            events.extend(self._event(pull, "opened") for pull in items)
            if len(items) < PAGE:
                return OpenPullRequests(tuple(events), True)
        return OpenPullRequests(tuple(events), False)


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"token {token}", "Accept": "application/json"}


class GiteaProvider:
    name = "gitea"
    event_header = "X-Gitea-Event"
    push_events = frozenset({"push"})
    comment_limit = COMMENT_LIMIT
    github_app = False

    def detect(self, headers: Mapping[str, str]) -> Detected | None:
        if "x-gitea-event" not in headers:
            return None
        return headers["x-gitea-event"], headers.get("x-gitea-delivery")

    def signature_valid(self, headers: Mapping[str, str], body: bytes, key: bytes) -> bool:
        return github.sha256_valid(headers.get("x-gitea-signature", ""), body, key)

    def repository_urls(self, payload: Mapping[str, Any]) -> list[str]:
        return repository_urls(payload)

    def pull_request_event(self, event: str, payload: Mapping[str, Any]) -> PullRequestEvent | None:
        return github.pull_request_event(self.name, event, payload)

    def comment_event(self, event: str, payload: Mapping[str, Any]) -> CommentEvent | None:
        return github.comment_event(self.name, event, payload)

    def head_ref(self, number: int, head_branch: str) -> str:
        return f"refs/pull/{int(number)}/head"

    def default_api_url(self, base: str, host: str) -> str:
        return f"{base}/api/v1"

    def client(self, api_url: str, project: str, number: int, token: Callable[[], str], *,
               sleep: Callable[[float], None], outbound: OutboundPolicy) -> ProviderClient:
        owner, repo = github.owner_repo(self.name, project)
        return Gitea(api_url, owner, repo, number, token(), sleep=sleep, outbound=outbound)

    def lister(self, api_url: str, project: str, token: Callable[[], str], *, outbound: OutboundPolicy,
               limits: PollLimits, sleep: Callable[[float], None]) -> PullRequestLister:
        owner, repo = github.owner_repo(self.name, project)
        return GiteaPulls(self.name, github.poll_http(api_url, _headers(token()), limits, sleep, outbound), owner,
                          repo, project, limits)


PROVIDER: GitProvider = GiteaProvider()
