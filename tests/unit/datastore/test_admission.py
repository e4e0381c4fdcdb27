"""The datastore's admission (docs/architecture.md §10.7): at most N requests in the app, a bounded first-come
first-served queue with a wait limit, 503 with Retry-After beyond it, and no slot lost to a request cancelled
while it waited."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from burrito_py.datastore.admission import Admission


class _App:
    """An ASGI app whose requests run until released, recording the order they entered in."""

    def __init__(self) -> None:
        self.entered: list[str] = []
        self.release: dict[str, asyncio.Event] = {}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        name = scope["path"].strip("/")
        self.entered.append(name)
        await self.release.setdefault(name, asyncio.Event()).wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def _request(admission: Admission, path: str) -> tuple[int, dict[str, str], bytes]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    await admission({"type": "http", "path": path, "method": "GET"}, receive, send)
    headers = {k.decode(): v.decode() for k, v in sent[0].get("headers", [])}
    return sent[0]["status"], headers, sent[1].get("body", b"")


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _free(app: _App, name: str) -> None:
    app.release.setdefault(name, asyncio.Event()).set()


def test_requests_beyond_the_queue_are_shed_and_the_queue_is_first_come_first_served() -> None:
    async def scenario() -> None:
        app = _App()
        admission = Admission(app, max_active=1, max_queued=2, queue_seconds=30)
        first = asyncio.create_task(_request(admission, "/a"))
        await _settle()
        queued = [asyncio.create_task(_request(admission, f"/{name}")) for name in ("b", "c")]
        await _settle()
        status, headers, body = await _request(admission, "/d")  # the queue is full: at once
        assert (status, headers["retry-after"]) == (503, "1")
        assert "overloaded" in json.loads(body)["error"]
        assert app.entered == ["a"]
        # Liveness is never queued.
        _free(app, "healthz")
        assert (await _request(admission, "/healthz"))[0] == 200
        for name in ("a", "b", "c"):
            _free(app, name)
        await asyncio.gather(first, *queued)
        assert app.entered == ["a", "healthz", "b", "c"]
        assert (admission.active, admission.queued) == (0, 0)

    asyncio.run(scenario())


def test_a_request_that_waits_too_long_is_shed() -> None:
    async def scenario() -> None:
        app = _App()
        admission = Admission(app, max_active=1, max_queued=5, queue_seconds=0.05)
        first = asyncio.create_task(_request(admission, "/a"))
        await _settle()
        status, headers, _ = await _request(admission, "/b")
        assert (status, headers["retry-after"]) == (503, "1")
        _free(app, "a")
        await first
        _free(app, "c")
        assert (await _request(admission, "/c"))[0] == 200  # the slot came back
        assert (admission.active, admission.queued) == (0, 0)

    asyncio.run(scenario())


def test_a_request_cancelled_while_queued_loses_no_slot() -> None:
    async def scenario() -> None:
        app = _App()
        admission = Admission(app, max_active=1, max_queued=5, queue_seconds=30)
        first = asyncio.create_task(_request(admission, "/a"))
        await _settle()
        gone = asyncio.create_task(_request(admission, "/gone"))
        waiting = asyncio.create_task(_request(admission, "/b"))
        await _settle()
        gone.cancel()
        await _settle()
        _free(app, "a")
        _free(app, "b")
        await asyncio.gather(first, waiting)
        assert app.entered == ["a", "b"]
        assert (admission.active, admission.queued) == (0, 0)

    asyncio.run(scenario())
