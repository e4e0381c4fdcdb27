"""The GitHub, GitLab and Gitea clients against a fake provider on loopback that answers with each provider's
documented shapes and records every call: one comment per pull request, edited in place, no call when nothing
changed, at most 3 calls per update, paging, rate limits waited out, tokens never in errors."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from burrito_py.plans.model import parse_plan
from burrito_py.pullrequests.comment import LayerResult, PullRequestResults, marker, render
from burrito_py.pullrequests.providers import CALL_BUDGET, Gitea, GitHub, GitLab, ProviderError, publish
from burrito_py.pullrequests.statuses import commit_statuses

from ...unit.plans.plan_fixtures import fixture

TOKEN = "ghp-secret-token-value"
SHA = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Fake:
    """One provider's state: comments (id → body), statuses, recorded calls, and rate limits to answer."""

    kind: str
    comments: dict[int, str] = field(default_factory=dict)
    statuses: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    auth: list[str] = field(default_factory=list)
    limited: int = 0  # answer this many next calls with a rate limit
    next_id: int = 100


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
            fake.calls.append((method, path))
            fake.auth.append(self.headers.get("Authorization") or self.headers.get("PRIVATE-TOKEN") or "")
            if fake.limited:
                fake.limited -= 1
                if fake.kind == "github":  # GitHub's secondary limit: 403 with Remaining 0 and Retry-After
                    return self._answer(403, {"message": "You have exceeded a secondary rate limit"},
                                        {"X-RateLimit-Remaining": "0", "Retry-After": "1"})
                return self._answer(429, {"message": "429 Too Many Requests"}, {"Retry-After": "2"})
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else {}
            if re.fullmatch(r".*/(comments|notes)", path) and method == "GET":
                items = sorted(fake.comments.items())
                if fake.kind == "github":
                    page = int(query.get("page", "1"))
                    chunk = items[(page - 1) * 2:page * 2]  # two per page: paging is exercised
                    more = page * 2 < len(items)
                    next_url = f'<http://{self.headers["Host"]}{path}?page={page + 1}>; rel="next"'
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
            if found and method in ("PATCH", "PUT"):
                fake.comments[int(found.group(1))] = body["body"]
                return self._answer(200, {"id": int(found.group(1)), "body": body["body"]})
            if re.fullmatch(r".*/statuses/[0-9a-f]+", path) and method == "POST":
                fake.statuses.append(body)
                return self._answer(201, {"id": len(fake.statuses), **body})
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


@pytest.fixture(params=["github", "gitlab", "gitea"])
def provider(request: pytest.FixtureRequest) -> Iterator[tuple[Fake, Any, list[float]]]:
    fake = Fake(request.param)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(fake))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    slept: list[float] = []
    client: Any
    if fake.kind == "github":
        client = GitHub(url, "team", "infra", 7, TOKEN, sleep=slept.append)
    elif fake.kind == "gitlab":
        client = GitLab(url + "/api/v4", "team/infra", 7, TOKEN, sleep=slept.append)
    else:
        client = Gitea(url + "/api/v1", "team", "infra", 7, TOKEN, sleep=slept.append)
    yield fake, client, slept
    client.http.close()
    server.shutdown()


def results(plan: str) -> PullRequestResults:
    layer = LayerResult("team-a", "app", "layers/app", "planned", parse_plan(fixture(plan)))
    return PullRequestResults("team-a/infra", 7, SHA, (layer,))


MARK = marker("team-a/infra", 7)


def test_one_comment_edited_in_place_and_nothing_when_unchanged(provider: tuple[Fake, Any, list[float]]) -> None:
    fake, client, _ = provider
    fake.comments.update({11: "LGTM", 12: "please rebase", 13: "another bot\nsays hi"})
    first = render(results("create"))
    done = publish(client, MARK, first, None, None, SHA, commit_statuses(results("create")), {})
    assert done.calls <= CALL_BUDGET + 2  # the first update lists the comments (two pages here)
    assert [body for body in fake.comments.values() if body.startswith(MARK)] == [first]
    assert fake.statuses[0]["description"] == "1 layers planned"  # the aggregate first

    # Three more pushes: always the same comment, edited; at most 3 calls each.
    for plan in ("update", "replace", "delete"):
        body = render(results(plan))
        done = publish(client, MARK, body, done.comment_id, first, SHA, commit_statuses(results(plan)), done.sent)
        first = body
        assert done.calls <= CALL_BUDGET
    ours = [body for body in fake.comments.values() if body.startswith(MARK)]
    assert ours == [first] and len(fake.comments) == 4

    # Nothing changed: not a single call.
    before = len(fake.calls)
    again = publish(client, MARK, first, done.comment_id, first, SHA, commit_statuses(results("delete")), done.sent)
    assert again.calls == 0 and len(fake.calls) == before

    # A new controllers process (no id known): finds the comment by its marker instead of posting another.
    fresh = publish(client, MARK, first, None, None, SHA, commit_statuses(results("delete")), done.sent)
    assert fresh.comment_id == done.comment_id and len(fake.comments) == 4
    assert all(header.endswith(TOKEN) for header in fake.auth)


def test_rate_limits_are_waited_out_once(provider: tuple[Fake, Any, list[float]]) -> None:
    fake, client, slept = provider
    fake.limited = 1
    client.create_comment("hello")
    assert slept == [1.0 if fake.kind == "github" else 2.0] and list(fake.comments.values()) == ["hello"]
    fake.limited = 2
    with pytest.raises(ProviderError) as refused:
        client.create_comment("again")
    assert TOKEN not in str(refused.value) and ("403" in str(refused.value) or "429" in str(refused.value))


def test_statuses_beyond_the_budget_wait_for_the_next_update(provider: tuple[Fake, Any, list[float]]) -> None:
    fake, client, _ = provider
    layers = tuple(LayerResult("team-a", f"l{i}", f"layers/l{i}", "planned", parse_plan(fixture("update")))
                   for i in range(5))
    pr = PullRequestResults("team-a/infra", 7, SHA, layers)
    body, statuses = render(pr), commit_statuses(pr)
    comment = client.create_comment(body)
    first = publish(client, MARK, body, comment, body, SHA, statuses, {})
    first_context = fake.statuses[0].get("context") or fake.statuses[0].get("name")
    assert first.calls == CALL_BUDGET and first_context == "burrito-py"
    second = publish(client, MARK, body, comment, body, SHA, statuses, first.sent)
    third = publish(client, MARK, body, comment, body, SHA, statuses, second.sent)
    assert set(third.sent) == {s.context for s in statuses}
    assert publish(client, MARK, body, comment, body, SHA, statuses, third.sent).calls == 0
    if fake.kind == "gitlab":
        assert {s["state"] for s in fake.statuses} == {"success"} and "name" in fake.statuses[0]
