"""Overload and slow clients (docs/architecture.md §10.7): the datastore sheds load rather than time out, and no
client holds a connection or a request slot forever.

- `Admission` (ASGI middleware): at most `max_active` requests are served at once; up to `max_queued` more wait
  (first come, first served) at most `queue_seconds`. A request beyond the queue, or one that waited too long,
  gets **503** with `Retry-After` at once, before its body is read: a client backs off instead of timing out,
  and the requests in progress keep their latency. Liveness (`/healthz`) and `/metrics` are never queued.
- `guarded_protocol` (uvicorn's httptools protocol with three timers): a connection is closed (aborted, so no
  buffered response keeps it) when its request headers are not complete `header_seconds` after it connected or
  began the request (a slowloris sending headers byte by byte), when a request body it is sending pauses for
  `read_seconds` while the datastore waits for it, or when it leaves the response unread for `write_seconds`
  while the datastore has more to send. An interrupted upload leaves nothing stored (§10).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from typing import Any

from prometheus_client import Counter
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 1
LATE_SECONDS = 0.5  # a timer that fires this much after its deadline: the event loop, not the client, was slow
UNQUEUED = frozenset({"/healthz", "/api/v1/healthz", "/metrics"})

REFUSED = Counter(
    "burrito_py_datastore_refused_total",
    "Requests answered 503 under overload, and connections closed for a slow client, by reason.",
    ["reason"],
)


class _Throttled:
    """One log line per `every` seconds at most: a flood of refusals must not become a flood of lines."""

    def __init__(self, every: float = 10.0) -> None:
        self.every, self.last, self.quiet = every, -every, 0

    def warning(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self.last < self.every:
            self.quiet += 1
            return
        if self.quiet:
            message += f" ({self.quiet} more like it in the last {self.every:.0f} s not logged)"
        self.last, self.quiet = now, 0
        log.warning(message, *args)


class Admission:
    """At most `max_active` requests in the app; `max_queued` more wait up to `queue_seconds`; the rest: 503."""

    def __init__(self, app: ASGIApp, max_active: int, max_queued: int, queue_seconds: float) -> None:
        self.app, self.max_active, self.max_queued, self.queue_seconds = app, max_active, max_queued, queue_seconds
        self.active = 0
        self.queued = 0
        # Each waiter's future is resolved True when a finishing request hands it its slot, False on time-out.
        self._waiters: deque[asyncio.Future[bool]] = deque()
        self._log = _Throttled()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNQUEUED:
            await self.app(scope, receive, send)
            return
        refused = await self._admit()
        if refused is not None:
            REFUSED.labels(refused).inc()
            self._log.warning("datastore overloaded (%d requests in progress, %d queued): %s answered 503",
                              self.active, self.queued, scope["method"])
            await _overloaded(send, refused)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self._release()

    async def _admit(self) -> str | None:
        """None once the request holds a slot; else why it is refused."""
        if self.active < self.max_active:
            self.active += 1
            return None
        if self.queued >= self.max_queued:
            return "queue-full"
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiters.append(waiter)
        self.queued += 1
        timer = loop.call_later(self.queue_seconds, _resolve, waiter, False)
        try:
            granted = await asyncio.shield(waiter)
        except asyncio.CancelledError:
            if waiter.done() and waiter.result():
                self._release()  # handed a slot as the request went away: pass it on
            else:
                waiter.cancel()
            raise
        finally:
            timer.cancel()
            self.queued -= 1
        if not granted:
            self._waiters.remove(waiter)
            return "queue-timeout"
        return None

    def _release(self) -> None:
        """A finishing request hands its slot to the longest waiting one, else frees it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if _resolve(waiter, True):
                return
        self.active -= 1


def _resolve(waiter: asyncio.Future[bool], value: bool) -> bool:
    if waiter.done():
        return False
    waiter.set_result(value)
    return True


async def _overloaded(send: Send, reason: str) -> None:
    why = "too many requests are waiting" if reason == "queue-full" else "the request waited too long for its turn"
    body = json.dumps({"error": f"the datastore is overloaded ({why}): retry after {RETRY_AFTER_SECONDS} s"}).encode()
    await send({"type": "http.response.start", "status": 503, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(RETRY_AFTER_SECONDS).encode()),
    ]})
    await send({"type": "http.response.body", "body": body})


def guarded_protocol(header_seconds: float, read_seconds: float, write_seconds: float,
                     component: str = "datastore") -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with the slow-client timers (the module's docstring); pass as `http=` to
    uvicorn.Config. `component` names who closed a connection in the log (the server uses it too: §11.2)."""
    throttled = _Throttled()

    class Guarded(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._timers: dict[str, asyncio.TimerHandle] = {}

        def _arm(self, name: str, seconds: float, fired: Any) -> None:
            self._disarm(name)
            deadline = self.loop.time() + seconds

            def check() -> None:
                # A loop running late (a starved process) runs due timers before it reads the sockets that became
                # readable meanwhile: look again once it has, rather than blame the client for our delay.
                if self.loop.time() - deadline > LATE_SECONDS:
                    self._timers[name] = self.loop.call_later(LATE_SECONDS, fired)
                    return
                fired()

            self._timers[name] = self.loop.call_later(seconds, check)

        def _disarm(self, name: str) -> None:
            timer = self._timers.pop(name, None)
            if timer is not None:
                timer.cancel()

        def _close(self, reason: str, why: str) -> None:
            REFUSED.labels(reason).inc()
            client = "%s:%d" % self.client if self.client else "a client"  # noqa: UP031 - the address pair
            throttled.warning("%s closed the connection of %s: %s", component, client, why)
            self.transport.abort()

        # Headers: a deadline from the connection (or the next request's first byte), not an idle timer, so
        # headers sent a byte at a time cannot keep it open.
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._arm("headers", header_seconds, self._slow_headers)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if "headers" not in self._timers:
                self._arm("headers", header_seconds, self._slow_headers)

        def _slow_headers(self) -> None:
            self._timers.pop("headers", None)
            self._close("slow-headers", f"its request headers were not complete within {header_seconds:g} s")

        # Body: an idle timer, reset by every piece that arrives; not counted while the datastore itself has
        # paused reading (the app has not taken what is buffered yet).
        def on_headers_complete(self) -> None:
            self._disarm("headers")
            super().on_headers_complete()
            self._arm("body", read_seconds, self._slow_body)

        def on_body(self, body: bytes) -> None:
            super().on_body(body)
            self._arm("body", read_seconds, self._slow_body)

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._disarm("body")

        def _slow_body(self) -> None:
            self._timers.pop("body", None)
            if self.flow is not None and self.flow.read_paused:
                self._arm("body", read_seconds, self._slow_body)
                return
            self._close("slow-body", f"its request body paused for {read_seconds:g} s")

        # Response: a client that stops reading fills the socket's buffers; the transport then pauses writing.
        def pause_writing(self) -> None:
            super().pause_writing()
            if "write" not in self._timers:
                self._arm("write", write_seconds, self._slow_reader)

        def resume_writing(self) -> None:
            super().resume_writing()
            self._disarm("write")

        def _slow_reader(self) -> None:
            self._timers.pop("write", None)
            self._close("slow-reader", f"it left the response unread for {write_seconds:g} s")

        def connection_lost(self, exc: Exception | None) -> None:
            for name in list(self._timers):
                self._disarm(name)
            super().connection_lost(exc)

    return Guarded
