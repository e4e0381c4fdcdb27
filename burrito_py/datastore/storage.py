"""Where the datastore keeps objects: one small streaming interface, so S3 and encryption slot in."""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Protocol

import anyio

CHUNK = 1024 * 1024
_KEY = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")


class TooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"body exceeds the limit of {limit} bytes")
        self.limit = limit


class DeleteFailed(Exception):
    """Some objects could not be deleted (the others were): deleting again retries just those."""

    def __init__(self, failed: list[str], total: int) -> None:
        shown = "; ".join(failed[:3]) + ("; ..." if len(failed) > 3 else "")
        super().__init__(f"{len(failed)} of {total} objects could not be deleted: {shown}")
        self.failed = failed


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

    async def delete_many(self, keys: Iterable[str]) -> None:
        """Delete every key (a missing one is fine); every key is checked before any is deleted. Raises
        DeleteFailed naming the keys that could not be deleted, after trying them all."""
        ...

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

    async def delete_many(self, keys: Iterable[str]) -> None:
        """Also removes the directories this leaves empty (never `root`): a deleted run leaves no trace."""
        paths = [self._path(key) for key in keys]

        def delete_all() -> list[str]:
            failed: list[str] = []
            for path in paths:
                try:
                    path.unlink(missing_ok=True)
                except OSError as exc:
                    failed.append(f"{path.relative_to(self.root)} ({exc.strerror or exc})")
            for directory in sorted({p.parent for p in paths}, key=lambda d: len(d.parts), reverse=True):
                self._prune(directory)
            return failed

        failed = await anyio.to_thread.run_sync(delete_all)
        if failed:
            raise DeleteFailed(failed, len(paths))

    def _prune(self, directory: Path) -> None:
        """Remove `directory` and its parents below `root` while they are empty; one holding anything (another
        run, an upload's temp file) stays."""
        while directory != self.root and directory.is_relative_to(self.root):
            try:
                directory.rmdir()
            except OSError:  # not empty, or already gone with a sibling's pass: stop here
                return
            directory = directory.parent

    async def list(self, prefix: str) -> list[str]:
        base = self._path(prefix.rstrip("/"))
        if not base.is_dir():
            return []
        return sorted(
            str(p.relative_to(self.root)) for p in base.rglob("*") if p.is_file() and not p.name.endswith(".tmp")
        )
