"""Wake-ups at a given time for a given key (a layer, a run, a repository), deduplicated.

One task serves all keys, so thousands of idle layers cost one sleeping coroutine, not a timer each.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

K = TypeVar("K")
log = logging.getLogger(__name__)


class Scheduler(Generic[K]):
    def __init__(self, handler: Callable[[K], Awaitable[None]], clock: Callable[[], float] | None = None) -> None:
        self._handler = handler
        self._clock = clock or (lambda: asyncio.get_running_loop().time())
        self._heap: list[tuple[float, int, K]] = []
        self._due: dict[K, float] = {}
        self._counter = itertools.count()
        self._wake = asyncio.Event()

    def schedule(self, key: K, delay: float) -> None:
        """Run `handler(key)` after `delay` seconds, unless an earlier wake-up is already due."""
        at = self._clock() + max(delay, 0.0)
        current = self._due.get(key)
        if current is not None and current <= at:
            return
        self._due[key] = at
        heapq.heappush(self._heap, (at, next(self._counter), key))
        self._wake.set()

    def __len__(self) -> int:
        return len(self._due)

    async def run(self) -> None:
        while True:
            self._wake.clear()
            now = self._clock()
            while self._heap and self._heap[0][0] <= now:
                at, _, key = heapq.heappop(self._heap)
                if self._due.get(key) != at:
                    continue  # superseded by an earlier wake-up
                del self._due[key]
                try:
                    await self._handler(key)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("scheduled reconcile of %s failed", key)
            timeout = self._heap[0][0] - self._clock() if self._heap else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
