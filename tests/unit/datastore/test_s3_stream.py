"""The S3 download stream reads one chunk ahead (docs/architecture.md §10): every byte in order, and the body is
closed exactly once, never while a worker thread is still reading it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator
from typing import cast

from burrito_py.datastore.s3 import _stream
from burrito_py.datastore.storage import CHUNK


class FakeBody:
    """botocore's StreamingBody as `_stream` uses it: `read(n)` in a worker thread, `close()`; records misuse."""

    def __init__(self, data: bytes, gate: threading.Event | None = None) -> None:
        self.data, self.offset, self.gate = data, 0, gate
        self.reads = self.closes = 0
        self.reading = threading.Event()
        self.problems: list[str] = []

    def read(self, size: int) -> bytes:
        if self.closes:
            self.problems.append("read after close")
        self.reading.set()
        if self.gate is not None:
            self.gate.wait(5)
        chunk = self.data[self.offset : self.offset + size]
        self.offset += len(chunk)
        self.reads += 1
        self.reading.clear()
        return chunk

    def close(self) -> None:
        if self.reading.is_set():
            self.problems.append("closed while a read was in flight")
        self.closes += 1


def test_every_byte_arrives_in_order_and_the_body_is_closed_once() -> None:
    data = bytes(range(256)) * (CHUNK * 3 // 256 + 7)  # three full chunks and a short one
    body = FakeBody(data[CHUNK:])

    async def run() -> bytes:
        return b"".join([chunk async for chunk in _stream(body, data[:CHUNK], len(data))])

    assert asyncio.run(run()) == data
    assert body.closes == 1 and body.problems == []


def test_an_object_of_one_chunk_costs_no_further_read() -> None:
    body = FakeBody(b"")

    async def run() -> bytes:
        return b"".join([chunk async for chunk in _stream(body, b"small", 5)])

    assert asyncio.run(run()) == b"small"
    assert body.reads == 0 and body.closes == 1

    empty = FakeBody(b"")

    async def run_empty() -> list[bytes]:
        return [chunk async for chunk in _stream(empty, b"", 0)]

    assert asyncio.run(run_empty()) == []
    assert empty.reads == 0 and empty.closes == 1


def test_a_download_abandoned_with_a_read_in_flight_closes_the_body_when_the_read_ends() -> None:
    gate = threading.Event()
    body = FakeBody(b"x" * (CHUNK * 4), gate)

    async def run() -> None:
        stream = cast(AsyncGenerator[bytes, None], _stream(body, b"y" * CHUNK, CHUNK * 5))
        assert await anext(stream) == b"y" * CHUNK  # the read of the next chunk is now in flight
        await asyncio.to_thread(body.reading.wait, 5)
        await stream.aclose()  # the client went away
        assert body.closes == 0  # not under the reading thread
        gate.set()
        for _ in range(100):  # the read ends, then the body is closed
            if body.closes:
                break
            await asyncio.sleep(0.01)

    asyncio.run(run())
    assert body.closes == 1 and body.problems == []
