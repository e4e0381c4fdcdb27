"""The lifecycle the local kubelet and controller manager share: an asyncio loop of their own in a daemon
thread, started and stopped from any thread, as a node's agents run beside the API server."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Self


class LoopThread:
    thread_name = "burrito-py-loop"

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None

    def _prepare(self) -> None:
        """Runs in the loop's thread before `_run`: asyncio objects must be made in their loop's thread."""

    async def _run(self) -> None:
        """The component's work; returns once `_stopping` is set and everything is cleaned up."""
        raise NotImplementedError

    def _join_timeout(self) -> float:
        return 10.0

    def start(self) -> None:
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._stopping = asyncio.Event()
            self._prepare()
            loop.call_soon(ready.set)
            loop.run_until_complete(self._run())
            loop.close()

        self._thread = threading.Thread(target=main, name=self.thread_name, daemon=True)
        self._thread.start()
        ready.wait()

    def stop(self) -> None:
        if self._loop is None or self._stopping is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already ended
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(self._join_timeout())

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
