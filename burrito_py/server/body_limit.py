"""A bound on every request body the server reads (docs/architecture.md §11.2), before any route sees it.

FastAPI reads and parses a route's JSON body before the route's dependencies run, the bearer token's review among
them: without a bound here, anyone on the public port could have the server hold a body of any size in memory before
answering 401. Plain ASGI (not BaseHTTPMiddleware), so bodies keep streaming to the routes that bound their own
(the webhook, `max_webhook_bytes`, is left to its route)."""

from __future__ import annotations

import json

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SELF_BOUNDED = frozenset({"/api/webhook"})


class BodyLimit:
    def __init__(self, app: ASGIApp, limit: int, setting: str) -> None:
        self.app, self.limit, self.setting = app, limit, setting

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({"error": f"the request body is over the limit of {self.limit} bytes ({self.setting})",
                           "limit": self.limit}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in SELF_BOUNDED:
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send)  # before a byte of it is read
            return
        received, over, started = 0, False, False

        async def bounded_receive() -> Message:
            nonlocal received, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    # What the route reads ends here, as if the client had gone; its answer is replaced below.
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def bounded_send(message: Message) -> None:
            nonlocal started
            if over:
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await self._refuse(send)
                return  # the route's own answer to a cut body is never sent
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, bounded_receive, bounded_send)
        except Exception:
            if not over:
                raise
            if not started:  # the route failed on the cut body (a disconnect it did not expect): answer for it
                await self._refuse(send)
