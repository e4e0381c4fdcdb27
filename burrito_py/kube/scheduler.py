"""A work queue with due times: `schedule(key, delay)` runs `handler(key)` then, once per key at a time.

One task serves all keys, so thousands of idle layers cost one sleeping coroutine, not a timer each.
A key is never handled twice concurrently: a key scheduled while it is being handled runs again
right after (the same guarantee as controller-runtime's work queue). A key whose handler keeps raising is
retried after 5 s, then 10, 20, … up to 5 minutes (`retry_delay`), and at once again after a success: a
permanent error (a permission the controllers lack) is not a request every 5 seconds forever.

At most `concurrency` handlers run at once. A handler that waits on something slow that is not its own work
(a plan policy's evaluation, which queues for the policy sandbox's workers: policy/sandbox.py) gives its slot
up meanwhile (`slot_released()`), so one tenant's slow policies never keep another tenant's reconciles queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
log = logging.getLogger(__name__)
RETRY_FIRST = 5.0
RETRY_CAP = 300.0
# How long a stopping scheduler waits for its cancelled handlers' own cleanup (their `finally` blocks).
STOP_GRACE = 10.0


def retry_delay(failures: int, first: float = RETRY_FIRST, cap: float = RETRY_CAP) -> float:
    """Seconds before the next try of a key whose handler failed `failures` times in a row."""
    return float(min(first * 2 ** min(max(failures - 1, 0), 30), cap))


class _Slot:
    """One handler's hold on its scheduler's semaphore; `held` so that a give-up cancelled half-way never
    releases twice."""

    def __init__(self, semaphore: asyncio.Semaphore) -> None:
        self._semaphore = semaphore
        self.held = False

    async def take(self) -> None:
        await self._semaphore.acquire()
        self.held = True

    def give(self) -> None:
        if self.held:
            self.held = False
            self._semaphore.release()


_SLOT: contextvars.ContextVar[_Slot | None] = contextvars.ContextVar("scheduler_slot", default=None)


@contextlib.asynccontextmanager
async def slot_released() -> AsyncIterator[None]:
    """Run the body without the calling handler's scheduler slot, taken back after (a no-op outside one)."""
    slot = _SLOT.get()
    if slot is None or not slot.held:
        yield
        return
    slot.give()
    try:
        yield
    finally:
        await slot.take()


class Scheduler(Generic[K]):
    def __init__(self, name: str, handler: Callable[[K], Awaitable[None]], concurrency: int = 8) -> None:
        self.name = name
        self._handler = handler
        self._heap: list[tuple[float, int, K]] = []
        self._due: dict[K, float] = {}
        self._active: set[K] = set()
        self._again: set[K] = set()
        self._counter = itertools.count()
        self._wake: asyncio.Event | None = None
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._failures: dict[K, int] = {}  # consecutive failed handlings per key

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    def schedule(self, key: K, delay: float = 0.0) -> None:
        """Handle `key` after `delay` seconds, unless an earlier wake-up is already due."""
        at = self._now() + max(delay, 0.0)
        current = self._due.get(key)
        if current is not None and current <= at:
            return
        self._due[key] = at
        heapq.heappush(self._heap, (at, next(self._counter), key))
        if self._wake is not None:
            self._wake.set()

    def pending(self) -> int:
        return len(self._due) + len(self._active)

    def busy(self) -> bool:
        """Whether a key is being handled or due now (wake-ups due later do not count)."""
        if self._active:
            return True
        now = self._now()
        return any(at <= now for at in self._due.values())

    async def run(self) -> None:
        self._wake = asyncio.Event()
        try:
            while True:
                self._wake.clear()
                now = self._now()
                while self._heap and self._heap[0][0] <= now:
                    at, _, key = heapq.heappop(self._heap)
                    if self._due.get(key) != at:
                        continue  # superseded by an earlier wake-up
                    del self._due[key]
                    if key in self._active:
                        self._again.add(key)
                    else:
                        self._start(key)
                timeout = self._heap[0][0] - self._now() if self._heap else None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=timeout)
        finally:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            if tasks:
                # Their cleanup (a policy worker given back, a slot freed) runs before run() returns, so what is
                # closed after the scheduler stops (the policy sandbox, the API client) is not used once closed.
                await asyncio.wait(tasks, timeout=STOP_GRACE)

    def _start(self, key: K) -> None:
        self._active.add(key)
        task = asyncio.create_task(self._handle(key), name=f"{self.name}:{key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, key: K) -> None:
        slot = _Slot(self._slots)
        _SLOT.set(slot)  # this task's own context: seen by what the handler awaits
        try:
            await slot.take()
            try:
                await self._handler(key)
            finally:
                slot.give()
            self._failures.pop(key, None)
        except asyncio.CancelledError:
            raise
        except Exception:
            failures = self._failures[key] = self._failures.get(key, 0) + 1
            delay = retry_delay(failures)
            log.exception("%s: reconcile of %s failed (%d in a row); retrying in %gs", self.name, key, failures,
                          delay)
            self.schedule(key, delay)
        finally:
            self._active.discard(key)
            if key in self._again:
                self._again.discard(key)
                self._start(key)
