"""Bounds of the UI's server-sent event streams (docs/architecture.md §11.4): each open stream holds a connection, a
queue and, for a run, a poll of the API every second, so they are counted per user and in total (a stream over the
bound is a 429 before it starts, which makes EventSource give up rather than retry), and each ends after a
maximum lifetime: the browser reconnects (`retry: 3000`) and the new request is authenticated and authorized
again. While a stream runs it re-checks the user's token and access every `recheck_seconds` and ends when either
is gone."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class TooManyStreams(Exception):
    """429: the user, or the server, holds as many event streams as allowed."""


class StreamLimits:
    def __init__(self, total: int, per_user: int) -> None:
        self.total, self.per_user = total, per_user
        self._open: Counter[str] = Counter()

    @property
    def open(self) -> int:
        return sum(self._open.values())

    def acquire(self, user: str) -> Callable[[], None]:
        """Count one more stream of `user`; returns the function that releases it (once)."""
        if self._open[user] >= self.per_user:
            raise TooManyStreams(f"{user} already has {self.per_user} live views open: close some tabs")
        if self.open >= self.total:
            raise TooManyStreams(f"the server already serves {self.total} live views: try again shortly")
        self._open[user] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._open[user] -= 1
                if self._open[user] <= 0:
                    del self._open[user]

        return release


class BoundedStream(StreamingResponse):
    """A StreamingResponse that releases its slot when it ends, however it ends (finished, client gone, error)."""

    def __init__(self, content: AsyncIterator[str], release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


async def bounded(events: AsyncIterator[str], *, lifetime: float, recheck_seconds: float,
                  still_allowed: Callable[[], Awaitable[bool]],
                  clock: Callable[[], float] = time.monotonic) -> AsyncIterator[str]:
    """`events`, ended after `lifetime` seconds, or at the first re-check (every `recheck_seconds`, whether or not
    `events` has anything to send) that finds the user's token or access gone."""
    started = clock()
    deadline, next_check = started + lifetime, started + recheck_seconds
    iterator = aiter(events)
    pending: asyncio.Future[str] | None = None
    try:
        while True:
            now = clock()
            if now >= deadline:
                return
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait({pending}, timeout=max(0.0, min(deadline, next_check) - now))
            if done:
                try:
                    chunk = pending.result()
                except StopAsyncIteration:
                    return
                pending = None
                yield chunk
            if clock() >= next_check:
                next_check = clock() + recheck_seconds
                if not await still_allowed():
                    return
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                await pending
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
