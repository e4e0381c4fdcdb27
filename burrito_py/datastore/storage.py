"""Where the datastore keeps objects: one small streaming interface, so S3 and encryption slot in."""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

import anyio

CHUNK = 1024 * 1024
_KEY = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")


class TooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"body exceeds the limit of {limit} bytes")
        self.limit = limit


def check_key(key: str) -> str:
    """Keys are built from validated segments; this is the last line of defence against traversal."""
    if not _KEY.fullmatch(key) or any(part in (".", "..") for part in key.split("/")):
        raise ValueError(f"invalid storage key {key!r}")
    return key


class Storage(Protocol):
    async def put(self, key: str, chunks: AsyncIterator[bytes], max_size: int) -> int:
        """Store atomically: on any error (or over `max_size`) nothing is left behind."""
        ...

    async def open(self, key: str) -> AsyncIterator[bytes] | None: ...

    async def exists(self, key: str) -> bool: ...

    async def delete(self, key: str) -> None: ...

    async def list(self, prefix: str) -> list[str]: ...


class FilesystemStorage:
    """Files under `root`; writes go to a temp file in the same directory, then `os.replace`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    async def put(self, key: str, chunks: AsyncIterator[bytes], max_size: int) -> int:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=f".{uuid.uuid4().hex}.tmp", dir=target.parent)
        tmp = Path(tmp_name)
        size = 0
        try:
            with os.fdopen(fd, "wb") as handle:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > max_size:
                        raise TooLarge(max_size)
                    await anyio.to_thread.run_sync(handle.write, chunk)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return size

    async def open(self, key: str) -> AsyncIterator[bytes] | None:
        target = self._path(key)
        try:
            handle = target.open("rb")  # opened now: a missing object is known before streaming
        except FileNotFoundError:
            return None

        async def stream() -> AsyncIterator[bytes]:
            with handle:
                while chunk := await anyio.to_thread.run_sync(handle.read, CHUNK):
                    yield chunk

        return stream()

    async def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    async def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    async def list(self, prefix: str) -> list[str]:
        base = self._path(prefix.rstrip("/"))
        if not base.is_dir():
            return []
        return sorted(
            str(p.relative_to(self.root)) for p in base.rglob("*") if p.is_file() and not p.name.endswith(".tmp")
        )
