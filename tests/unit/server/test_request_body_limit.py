"""Attack: an outsider on the server's public port sends a huge body to a REST route that takes JSON. FastAPI reads
and parses the body before the route's dependencies (the token review) run, so without a bound the server held any
body in memory before its 401 (server/body_limit.py, docs/architecture.md §11.2, §24)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.types import Message

from burrito_py.datastore.auth import Principal, Unauthenticated
from burrito_py.datastore.client import DatastoreClient
from burrito_py.server.app import create_app
from burrito_py.server.settings import ServerSettings

MIB = 1024 * 1024


class Refusing:
    """An authenticator that rejects every token, counting the reviews asked."""

    def __init__(self) -> None:
        self.reviews = 0

    async def authenticate(self, token: str) -> Principal:
        self.reviews += 1
        raise Unauthenticated("the bearer token was rejected")


def call(path: str, chunks: list[bytes], headers: dict[str, str], limit: int = MIB) -> tuple[int, dict[str, Any], int,
                                                                                             int]:
    """(status, JSON answer, body bytes the server took from the client, token reviews asked)."""
    authenticator = Refusing()
    settings = ServerSettings(max_request_bytes=limit, ui_enabled=True)
    app = create_app(settings, kube=object(), datastore=DatastoreClient("http://127.0.0.1:9"),  # type: ignore[arg-type]
                     authenticator=authenticator)
    pending, taken, sent = list(chunks), 0, list[Message]()

    async def receive() -> Message:
        nonlocal taken
        if not pending:
            return {"type": "http.request", "body": b"", "more_body": False}
        chunk = pending.pop(0)
        taken += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()], "http_version": "1.1",
             "scheme": "http", "server": ("server", 8081), "client": ("203.0.113.7", 40000), "root_path": ""}
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    try:
        answer = json.loads(body)
    except ValueError:
        answer = {"text": body.decode("utf-8", "replace")}
    return status, answer, taken, authenticator.reviews


def huge_operation(megabytes: int) -> list[bytes]:
    return [b'{"operation": "state-rm", "address": "a", "pad": "', *[b"x" * MIB] * megabytes, b'"}']


def test_attack_a_huge_rest_body_without_a_token_is_refused_before_it_is_read_whole() -> None:
    # Chunked: no Content-Length to refuse it by, so the bound applies while it streams.
    status, answer, taken, reviews = call("/api/layers/team-a/app/operations", huge_operation(64),
                                          {"Content-Type": "application/json", "Authorization": "Bearer forged"})
    assert status == 413, answer
    assert "BURRITO_PY_SERVER_MAX_REQUEST_BYTES" in answer["error"] and answer["limit"] == MIB
    assert taken <= 2 * MIB + 64  # the bound and the chunk that crossed it, never the 64 MiB sent
    assert reviews == 0


def test_a_declared_length_over_the_bound_is_refused_before_a_byte_is_read() -> None:
    status, answer, taken, reviews = call(
        "/api/layers/team-a/app/state/rollback", huge_operation(8),
        {"Content-Type": "application/json", "Content-Length": str(8 * MIB + 80), "Authorization": "Bearer forged"})
    assert (status, taken, reviews) == (413, 0, 0), answer


def test_a_ui_form_over_the_bound_is_refused() -> None:
    status, _, taken, _ = call("/ui/login", [b"token=" + b"x" * MIB] * 3,
                               {"Content-Type": "application/x-www-form-urlencoded"}, limit=64 * 1024)
    assert status == 413
    assert taken <= 64 * 1024 + MIB + 6


def test_a_body_within_the_bound_still_reaches_the_token_review() -> None:
    status, answer, _, reviews = call("/api/layers/team-a/app/operations",
                                          [b'{"operation": "state-rm", "address": "a"}'],
                                          {"Content-Type": "application/json", "Authorization": "Bearer forged"})
    assert (status, reviews) == (401, 1), answer
