"""A fake GitHub, GitLab, Gitea, Bitbucket (Cloud, Data Center) or Azure DevOps API on loopback: comments (GitHub
issue comments, GitLab notes, Azure DevOps threads) listed with each provider's paging, created and edited; commit
statuses; rate limits when asked; every call recorded with its time; pull requests (GitHub, Gitea, GitLab) opened,
pushed to, closed and merged by the test (`open_pull`, `push`, `close`) and listed as the poll reads them
(docs/architecture.md §11.3). Answers follow the providers' documented shapes as far as the clients read them."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote


@dataclass
class Fake:
    """One provider's state: comments (id → body), statuses, recorded calls, and rate limits to answer."""

    kind: str
    comments: dict[int, str] = field(default_factory=dict)
    statuses: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # time.monotonic() of each call, in order
    auth: list[str] = field(default_factory=list)
    limited: int = 0  # answer this many next calls with a rate limit
    next_id: int = 100
    next_page_host: str | None = None  # a hostile provider: GitHub's `Link` to the next page names this host
    # Comment commands (§11.3): who may write (GitHub/Gitea login → permission; GitLab user id → access level),
    # the pull request's author, approvals, mergeability and how far its head is behind its base.
    permissions: dict[str, str] = field(default_factory=dict)
    members: dict[int, int] = field(default_factory=dict)
    author: str = "author"
    approved_by: list[str] = field(default_factory=list)
    # GitHub/Gitea: the commit those approvals were given at (a review's `commit_id`); None: the pull request's
    # current head when the fake has it (`open_pull`), otherwise none at all.
    reviewed_at: str | None = None
    mergeable: bool | None = True
    behind: int = 0
    versions: dict[int, int] = field(default_factory=dict)  # Bitbucket Data Center: each comment's version
    # Pull requests (GitHub, Gitea, GitLab), by number: what `open_pull`, `push` and `close` made of them.
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    project: str = "team/infra"
    retry_after: str = ""  # answer a rate limit with this Retry-After (default: GitHub 1, the others 2)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    clock: datetime = field(default_factory=lambda: datetime(2030, 1, 1, tzinfo=UTC))

    def _tick(self) -> str:
        # Each change one second later than the last: the providers write whole seconds.
        self.clock += timedelta(seconds=1)
        return self.clock.strftime("%Y-%m-%dT%H:%M:%SZ")

    def open_pull(self, number: int, head_sha: str, *, base: str = "main", head_branch: str = "feature",
                  title: str = "A change", fork: bool = False, author: str = "author") -> None:
        with self.lock:
            self.pulls[number] = {"number": number, "base": base, "head_branch": head_branch, "head_sha": head_sha,
                                  "title": title, "state": "open", "fork": fork, "author": author,
                                  "updated_at": self._tick()}

    def push(self, number: int, head_sha: str) -> None:
        with self.lock:
            self.pulls[number].update(head_sha=head_sha, updated_at=self._tick())

    def close(self, number: int, *, merged: bool = False) -> None:
        with self.lock:
            self.pulls[number].update(state="merged" if merged else "closed", updated_at=self._tick())

    def retitle(self, number: int, title: str) -> None:
        with self.lock:
            self.pulls[number].update(title=title, updated_at=self._tick())

    def github_pull(self, number: int, host: str) -> dict[str, Any]:
        pull = self.pulls[number]
        tip = "1" * 40
        base_repo = {"id": 1, "full_name": self.project}
        head_repo = {"id": 2, "full_name": "someone/infra", "fork": True} if pull["fork"] else base_repo
        return {"number": number, "state": "open" if pull["state"] == "open" else "closed",
                "merged": pull["state"] == "merged", "title": pull["title"],
                "html_url": f"http://{host}/{self.project}/pull/{number}", "updated_at": pull["updated_at"],
                "user": {"login": pull["author"]},
                "head": {"ref": pull["head_branch"], "sha": pull["head_sha"], "repo": head_repo},
                "base": {"ref": pull["base"], "sha": tip, "repo": base_repo},
                "mergeable": self.mergeable, "merge_base": tip if not self.behind else "2" * 40}

    def gitlab_mr(self, number: int, host: str) -> dict[str, Any]:
        pull = self.pulls[number]
        status = {True: "mergeable", False: "conflict", None: "checking"}[self.mergeable]
        return {"iid": number, "state": {"open": "opened"}.get(pull["state"], pull["state"]),
                "target_branch": pull["base"], "source_branch": pull["head_branch"], "sha": pull["head_sha"],
                "title": pull["title"], "web_url": f"http://{host}/{self.project}/-/merge_requests/{number}",
                "updated_at": pull["updated_at"], "target_project_id": 1, "source_project_id": 2 if pull["fork"] else 1,
                "author": {"username": pull["author"]}, "detailed_merge_status": status,
                "diverged_commits_count": self.behind}


def handler(fake: Fake) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def _answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self, method: str) -> None:
            path = self.path.split("?")[0]
            query = dict(p.split("=", 1) for p in self.path.split("?")[1].split("&")) if "?" in self.path else {}
            fake.times.append(time.monotonic())
            fake.calls.append((method, path))
            fake.auth.append(self.headers.get("Authorization") or self.headers.get("PRIVATE-TOKEN") or "")
            if fake.limited:
                fake.limited -= 1
                if fake.kind == "github":  # GitHub's secondary limit: 403 with Remaining 0 and Retry-After
                    return self._answer(403, {"message": "You have exceeded a secondary rate limit"},
                                        {"X-RateLimit-Remaining": "0", "Retry-After": fake.retry_after or "1"})
                return self._answer(429, {"message": "429 Too Many Requests"}, {"Retry-After": fake.retry_after or "2"})
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else {}
            if fake.kind == "bitbucket":
                return self._bitbucket(method, path, query, body)
            if fake.kind == "bitbucket-datacenter":
                return self._bitbucket_datacenter(method, path, query, body)
            if fake.kind == "azure-devops":
                return self._azure_devops(method, path, query, body)
            if method == "GET" and (listing := self._pulls(path, query)):
                return listing
            if re.fullmatch(r".*/(comments|notes)", path) and method == "GET":
                items = sorted(fake.comments.items())
                if fake.kind == "github":
                    page = int(query.get("page", "1"))
                    chunk = items[(page - 1) * 2:page * 2]  # two per page: paging is exercised
                    more = page * 2 < len(items)
                    host = fake.next_page_host or self.headers["Host"]
                    next_url = f'<http://{host}{path}?page={page + 1}>; rel="next"'
                    link = {"Link": next_url} if more else {}
                    return self._answer(200, [{"id": i, "body": b} for i, b in chunk], link)
                if fake.kind == "gitlab":
                    page = int(query.get("page", "1"))
                    chunk = items[(page - 1) * 2:page * 2]
                    more = {"X-Next-Page": str(page + 1)} if page * 2 < len(items) else {"X-Next-Page": ""}
                    notes = [{"id": i, "body": b, "system": False} for i, b in chunk]
                    return self._answer(200, [*notes, {"id": 1, "body": "added 1 commit", "system": True}], more)
                page, limit = int(query.get("page", "1")), int(query.get("limit", "50"))
                return self._answer(200, [{"id": i, "body": b} for i, b in items[(page - 1) * limit:page * limit]])
            if re.fullmatch(r".*/(comments|notes)", path) and method == "POST":
                fake.next_id += 1
                fake.comments[fake.next_id] = body["body"]
                return self._answer(201, {"id": fake.next_id, "body": body["body"]})
            found = re.fullmatch(r".*/(?:comments|notes)/(\d+)", path)
            if found and method in ("PATCH", "PUT") and int(found.group(1)) in fake.comments:
                fake.comments[int(found.group(1))] = body["body"]
                return self._answer(200, {"id": int(found.group(1)), "body": body["body"]})
            if method == "GET" and (found := re.fullmatch(r".*/collaborators/([^/]+)/permission", path)):
                login = found.group(1)
                if login not in fake.permissions:
                    return self._answer(404, {"message": "Not Found"})
                return self._answer(200, {"permission": fake.permissions[login], "user": {"login": login}})
            if method == "GET" and (found := re.fullmatch(r".*/members/all/(\d+)", path)):
                level = fake.members.get(int(found.group(1)))
                if level is None:
                    return self._answer(404, {"message": "404 Not found"})
                return self._answer(200, {"id": int(found.group(1)), "access_level": level})
            if method == "GET" and (found := re.fullmatch(r".*/pulls/(\d+)/reviews", path)):
                page = int(query.get("page", "1"))
                commit = fake.reviewed_at or (fake.pulls.get(int(found.group(1))) or {}).get("head_sha")
                reviews = [{"user": {"login": u}, "state": "APPROVED", "commit_id": commit}
                           for u in fake.approved_by] if page == 1 else []
                return self._answer(200, reviews)
            if method == "GET" and re.fullmatch(r".*/pulls/\d+", path):
                tip = "1" * 40
                return self._answer(200, {"user": {"login": fake.author}, "mergeable": fake.mergeable,
                                          "base": {"sha": tip}, "merge_base": tip if not fake.behind else "2" * 40})
            if method == "GET" and re.fullmatch(r".*/compare/.+", path):
                return self._answer(200, {"behind_by": fake.behind, "ahead_by": 1})
            if method == "GET" and re.fullmatch(r".*/merge_requests/\d+/approvals", path):
                return self._answer(200, {"approved_by": [{"user": {"username": u}} for u in fake.approved_by]})
            if method == "GET" and re.fullmatch(r".*/merge_requests/\d+", path):
                status = {True: "mergeable", False: "conflict", None: "checking"}[fake.mergeable]
                return self._answer(200, {"author": {"username": fake.author}, "detailed_merge_status": status,
                                          "diverged_commits_count": fake.behind})
            if re.fullmatch(r".*/statuses/[0-9a-f]+", path) and method == "POST":
                fake.statuses.append({**body, "sha": path.rsplit("/", 1)[1]})
                return self._answer(201, {"id": len(fake.statuses), **body})
            return self._answer(404, {"message": "Not Found"})

        def _pulls(self, path: str, query: dict[str, str]) -> bool:
            """GitHub's and Gitea's `pulls` and GitLab's `merge_requests`: a listing of the open ones (GitHub
            `per_page` with `Link`, Gitea `page`/`limit`, GitLab `per_page`/`page` with `X-Next-Page`) and one by
            number (404 for one it does not have). False when `path` is none of them, or the fake has no pull
            requests (then `pulls/{n}` and `merge_requests/{iid}` answer the review facts' shape below)."""
            host = self.headers["Host"]
            with fake.lock:
                if fake.kind in ("github", "gitea") and re.fullmatch(r".*/repos/[^/]+/[^/]+/pulls", path):
                    assert query.get("state") == "open"
                    numbers = sorted(n for n, p in fake.pulls.items() if p["state"] == "open")
                    page = int(query.get("page", "1"))
                    size = int(query.get("per_page" if fake.kind == "github" else "limit", "30"))
                    chunk = [fake.github_pull(n, host) for n in numbers[(page - 1) * size:page * size]]
                    more = page * size < len(numbers)
                    link = {"Link": f'<http://{host}{path}?state=open&per_page={size}&page={page + 1}>; rel="next"'}
                    self._answer(200, chunk, link if more and fake.kind == "github" else {})
                    return True
                found = re.fullmatch(r".*/repos/[^/]+/[^/]+/pulls/(\d+)", path)
                if fake.kind in ("github", "gitea") and found and fake.pulls:  # else: the review facts' shape
                    number = int(found.group(1))
                    if number not in fake.pulls:
                        self._answer(404, {"message": "Not Found"})
                    else:
                        self._answer(200, fake.github_pull(number, host))
                    return True
                if fake.kind == "gitlab" and re.fullmatch(r".*/projects/[^/]+/merge_requests", path):
                    assert query.get("state") == "opened"
                    numbers = sorted(n for n, p in fake.pulls.items() if p["state"] == "open")
                    page, size = int(query.get("page", "1")), int(query.get("per_page", "20"))
                    chunk = [fake.gitlab_mr(n, host) for n in numbers[(page - 1) * size:page * size]]
                    self._answer(200, chunk, {"X-Next-Page": str(page + 1) if page * size < len(numbers) else ""})
                    return True
                found = re.fullmatch(r".*/projects/[^/]+/merge_requests/(\d+)", path)
                if fake.kind == "gitlab" and found and fake.pulls:
                    number = int(found.group(1))
                    if number not in fake.pulls:
                        self._answer(404, {"message": "404 Not found"})
                    else:
                        self._answer(200, fake.gitlab_mr(number, host))
                    return True
            return False

        def _bitbucket(self, method: str, path: str, query: dict[str, str], body: Any) -> None:
            """Bitbucket Cloud's API 2.0: paged `values` with a `next` URL, comments' `content.raw`, build
            statuses, the workspace's repository permissions by account id, the pull request's participants."""
            if re.fullmatch(r".*/pullrequests/\d+/comments", path) and method == "GET":
                items = sorted(fake.comments.items())
                page = int(query.get("page", "1"))
                chunk = items[(page - 1) * 2:page * 2]
                answer: dict[str, Any] = {"values": [{"id": i, "content": {"raw": b}, "deleted": False}
                                                     for i, b in chunk], "pagelen": 2, "page": page}
                if page * 2 < len(items):
                    host = fake.next_page_host or self.headers["Host"]
                    answer["next"] = f"http://{host}{path}?page={page + 1}"
                return self._answer(200, answer)
            if re.fullmatch(r".*/pullrequests/\d+/comments", path) and method == "POST":
                fake.next_id += 1
                fake.comments[fake.next_id] = body["content"]["raw"]
                return self._answer(201, {"id": fake.next_id, "content": body["content"]})
            found = re.fullmatch(r".*/pullrequests/\d+/comments/(\d+)", path)
            if found and method == "PUT" and int(found.group(1)) in fake.comments:
                fake.comments[int(found.group(1))] = body["content"]["raw"]
                return self._answer(200, {"id": int(found.group(1)), "content": body["content"]})
            found = re.fullmatch(r".*/commit/([0-9a-f]+)/statuses/build", path)
            if found and method == "POST":
                if not body.get("url") or len(body.get("key", "")) > 40:
                    return self._answer(400, {"error": {"message": "url required; key at most 40 characters"}})
                fake.statuses.append({**body, "context": body["name"], "sha": found.group(1)})
                return self._answer(201, body)
            if method == "GET" and re.fullmatch(r".*/workspaces/[^/]+/permissions/repositories/[^/]+", path):
                wanted = re.fullmatch(r'user\.account_id="(.*)"', unquote(query.get("q", "")))
                who = [u for u in fake.permissions if wanted is None or u == wanted.group(1)]
                return self._answer(200, {"values": [{"permission": fake.permissions[u], "user": {"account_id": u}}
                                                     for u in who]})
            if method == "GET" and re.fullmatch(r".*/pullrequests/\d+", path):
                participants = [{"user": {"account_id": u}, "approved": True, "state": "approved"}
                                for u in fake.approved_by]
                participants.append({"user": {"account_id": "557058:commenter"}, "approved": False})
                return self._answer(200, {"author": {"account_id": fake.author}, "participants": participants})
            return self._answer(404, {"type": "error", "error": {"message": "Not Found"}})

        def _bitbucket_datacenter(self, method: str, path: str, query: dict[str, str], body: Any) -> None:
            """Bitbucket Data Center's REST 1.0: `start`/`limit` pages with `isLastPage`/`nextPageStart`, comments in
            the activities, edits that must name the comment's current version, build statuses, explicit user
            grants filtered by name, reviewers, `merge` and the commits of the base the head lacks."""
            def paged(values: list[dict[str, Any]]) -> None:
                start, limit = int(query.get("start", "0")), min(int(query.get("limit", "25")), 2)  # small pages
                chunk = values[start:start + limit]
                last = start + limit >= len(values)
                return self._answer(200, {"values": chunk, "isLastPage": last, "start": start, "size": len(chunk),
                                          **({} if last else {"nextPageStart": start + limit})})

            if re.fullmatch(r".*/pull-requests/\d+/activities", path) and method == "GET":
                return paged([{"action": "COMMENTED", "commentAction": "ADDED",
                               "comment": {"id": i, "text": b, "version": fake.versions.get(i, 0)}}
                              for i, b in sorted(fake.comments.items())] + [{"action": "APPROVED"}])
            if re.fullmatch(r".*/pull-requests/\d+/comments", path) and method == "POST":
                fake.next_id += 1
                fake.comments[fake.next_id] = body["text"]
                return self._answer(201, {"id": fake.next_id, "text": body["text"], "version": 0})
            found = re.fullmatch(r".*/pull-requests/\d+/comments/(\d+)", path)
            if found and int(found.group(1)) in fake.comments:
                number = int(found.group(1))
                version = fake.versions.get(number, 0)
                if method == "GET":
                    return self._answer(200, {"id": number, "text": fake.comments[number], "version": version})
                if method == "PUT":
                    if body.get("version") != version:
                        return self._answer(409, {"errors": [{"message": "the comment has been updated"}]})
                    fake.comments[number] = body["text"]
                    fake.versions[number] = version + 1
                    return self._answer(200, {"id": number, "text": body["text"], "version": version + 1})
            found = re.fullmatch(r".*/build-status/1\.0/commits/([0-9a-f]+)", path)
            if found and method == "POST":
                if not body.get("url") or body.get("state") not in ("INPROGRESS", "SUCCESSFUL", "FAILED"):
                    return self._answer(400, {"errors": [{"message": "url and state required"}]})
                fake.statuses.append({**body, "context": body["key"], "sha": found.group(1)})
                self.send_response(204)  # No Content, as Bitbucket answers
                self.end_headers()
                return None
            scope = re.fullmatch(r".*/projects/[^/]+(/repos/[^/]+)?/permissions/users", path)
            if scope and method == "GET":
                level = "repo" if scope.group(1) else "project"
                wanted = unquote(query.get("filter", ""))
                return paged([{"user": {"name": u}, "permission": p} for u, p in sorted(fake.permissions.items())
                              if wanted in u and p.lower().startswith(level)])
            if method == "GET" and re.fullmatch(r".*/pull-requests/\d+/merge", path):
                return self._answer(200, {"canMerge": fake.mergeable, "conflicted": fake.mergeable is False,
                                          "vetoes": []})
            if method == "GET" and re.fullmatch(r".*/pull-requests/\d+", path):
                reviewers = [{"user": {"name": u}, "approved": True, "status": "APPROVED"} for u in fake.approved_by]
                reviewers.append({"user": {"name": "someone"}, "approved": False, "status": "UNAPPROVED"})
                return self._answer(200, {"author": {"user": {"name": fake.author}}, "reviewers": reviewers})
            if method == "GET" and re.fullmatch(r".*/repos/[^/]+/commits", path):
                return paged([{"id": f"{i:040x}"} for i in range(fake.behind)])
            return self._answer(404, {"errors": [{"message": "Not Found"}]})

        def _azure_devops(self, method: str, path: str, query: dict[str, str], body: Any) -> None:
            """Azure DevOps' REST API 7.1 under `/<org>/<project>/_apis/git/repositories/<repo>/pullRequests/<id>`:
            threads (each comment here one thread, its first comment id 1), comment edits, pull request statuses
            (`context.name`), the pull request (creator, reviewers' votes, mergeStatus). Every call names
            `api-version`."""
            if query.get("api-version") != "7.1":
                return self._answer(400, {"message": "api-version is required"})
            base = r".*/_apis/git/repositories/[^/]+/pullRequests/\d+"
            if re.fullmatch(base + "/threads", path) and method == "GET":
                threads = [{"id": t, "comments": [{"id": 1, "content": b, "commentType": "text"}]}
                           for t, b in sorted(fake.comments.items())]
                threads.append({"id": 1, "comments": [{"id": 1, "content": "voted", "commentType": "system"}]})
                return self._answer(200, {"value": threads, "count": len(threads)})
            if re.fullmatch(base + "/threads", path) and method == "POST":
                fake.next_id += 1
                fake.comments[fake.next_id] = body["comments"][0]["content"]
                return self._answer(200, {"id": fake.next_id, "comments": [{"id": 1, **body["comments"][0]}]})
            found = re.fullmatch(base + r"/threads/(\d+)/comments/1", path)
            if found and method == "PATCH" and int(found.group(1)) in fake.comments:
                fake.comments[int(found.group(1))] = body["content"]
                return self._answer(200, {"id": 1, "content": body["content"]})
            if re.fullmatch(base + "/statuses", path) and method == "POST":
                if body.get("state") not in ("pending", "succeeded", "failed"):
                    return self._answer(400, {"message": "state"})
                fake.statuses.append({**body, "context": body["context"]["name"], "sha": ""})
                return self._answer(200, {"id": len(fake.statuses), **body})
            if re.fullmatch(base, path) and method == "GET":
                status = {True: "succeeded", False: "conflicts", None: "queued"}[fake.mergeable]
                reviewers = [{"uniqueName": u, "vote": 10} for u in fake.approved_by]
                reviewers.append({"uniqueName": "someone@example.com", "vote": -5})
                return self._answer(200, {"createdBy": {"uniqueName": fake.author}, "reviewers": reviewers,
                                          "mergeStatus": status})
            return self._answer(404, {"message": "Not Found"})

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_PATCH(self) -> None:
            self._handle("PATCH")

        def do_PUT(self) -> None:
            self._handle("PUT")

    return Handler


@contextlib.contextmanager
def running_fake_provider(kind: str, host: str = "127.0.0.1") -> Iterator[tuple[Fake, str]]:
    """(the fake's state, its base URL). GitLab's API lives under `/api/v4`, Gitea's under `/api/v1`: any prefix
    is served. `host`: the loopback address it listens on (127.0.0.2 plays another host)."""
    fake = Fake(kind)
    server = ThreadingHTTPServer((host, 0), handler(fake))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
