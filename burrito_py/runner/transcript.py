"""A copy of what the runner prints (terraform's output included), kept so that an attempt interrupted by
SIGTERM can upload the log it has itself: once a drained node's pod is gone, nobody can read its log any more.

`capturing()` puts a tee in front of `sys.stdout` and `sys.stderr` for the attempt; the copy keeps the last
`limit` characters (terraform's output is streamed whole to the real streams either way). The tee masks secret
values (`masking`) before anything reaches the real streams (the pod log) or the copy.
"""

from __future__ import annotations

import io
import sys
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO, cast

from burrito_py.runner.masking import Masker, masker

__all__ = ["Transcript"]

DEFAULT_LIMIT = 8 * 1024 * 1024


class Transcript:
    def __init__(self, limit: int = DEFAULT_LIMIT, mask: Masker | None = None) -> None:
        self.limit = limit
        self._mask = mask
        self._parts: deque[str] = deque()
        self._size = 0
        self._dropped = 0
        self._lock = threading.Lock()  # the plan's uploads and `show -json` print from worker threads

    def add(self, text: str) -> None:
        with self._lock:
            self._parts.append(text)
            self._size += len(text)
            while self._size > self.limit and len(self._parts) > 1:
                dropped = self._parts.popleft()
                self._size -= len(dropped)
                self._dropped += len(dropped)

    def text(self) -> str:
        with self._lock:
            head = f"(the first {self._dropped} characters of this log were dropped)\n" if self._dropped else ""
            return head + "".join(self._parts)

    def masked(self, text: str) -> str:
        return (self._mask or masker()).mask(text)

    @contextmanager
    def capturing(self) -> Iterator[Transcript]:
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = (cast(TextIO, _Tee(stream, self)) for stream in saved)
        try:
            yield self
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            sys.stdout, sys.stderr = saved


class _Tee(io.TextIOBase):
    """Writes go to `inner` and into the transcript; everything else is `inner`'s."""

    def __init__(self, inner: TextIO, transcript: Transcript) -> None:
        super().__init__()
        self._inner, self._transcript = inner, transcript

    def write(self, text: str) -> int:
        masked = self._transcript.masked(text)
        self._inner.write(masked)
        self._transcript.add(masked)
        return len(text)

    def flush(self) -> None:
        self._inner.flush()

    def fileno(self) -> int:
        return self._inner.fileno()

    def isatty(self) -> bool:
        return self._inner.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._inner.encoding
