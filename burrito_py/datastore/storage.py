"""Where the datastore keeps objects: one small streaming interface, so S3 and encryption slot in.

Every object is stored with the SHA-256 and size of its bytes (as clients send and read them), computed while
it streams in and kept atomically with it (the filesystem: a header in the same file; S3: the object's
metadata), so the datastore can answer `X-Burrito-Sha256` without reading the object again. A `once` write
(what runners do) never replaces an object: the same bytes again are fine (a retried upload), other bytes are
refused (`Exists`).
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What is recorded with an object: the SHA-256 (hex) and size of its bytes as clients see them.
    `recorded` is False for an object stored before sums were kept (its sum was computed from what the
    backend holds, which the encryption wrapper must then compute again from the plaintext)."""

    sha256: str
    size: int
    recorded: bool = True


@dataclass(frozen=True, slots=True)
class Stored:
    """The answer to a write: what is stored now. `created` is False when a `once` write found the very same
    bytes already there (a retried upload)."""

    size: int
    sha256: str
    created: bool = True


@dataclass(frozen=True, slots=True)
class Opened:
    info: ObjectInfo
    stream: AsyncIterator[bytes]


class Mismatch(Exception):
    """The body is not what its client declared (X-Burrito-Sha256 and Content-Length); nothing was stored."""

    def __init__(self, expected: ObjectInfo, got: ObjectInfo) -> None:
        super().__init__(f"the body's sha256 {got.sha256} ({got.size} bytes) is not the declared {expected.sha256} "
                         f"({expected.size} bytes)")


class Exists(Exception):
    """A `once` write to a key that holds other bytes; nothing was changed."""

    def __init__(self, key: str, sha256: str) -> None:
        super().__init__(f"{key} is already stored (sha256 {sha256}) with other content; it is written once")
        self.key, self.sha256 = key, sha256


def check_key(key: str) -> str:
    """Keys are built from validated segments; this is the last line of defence against traversal."""
    if not _KEY.fullmatch(key) or any(part in (".", "..") for part in key.split("/")):
        raise ValueError(f"invalid storage key {key!r}")
    return key


Describe = Callable[[], ObjectInfo]


def check_expected(expected: ObjectInfo | None, got: ObjectInfo) -> None:
    if expected is not None and (expected.sha256, expected.size) != (got.sha256, got.size):
        raise Mismatch(expected, got)


class Storage(Protocol):
    async def put(self, key: str, chunks: AsyncIterator[bytes], max_size: int, *, once: bool = False,
                  describe: Describe | None = None, expected: ObjectInfo | None = None) -> Stored:
        """Store atomically, with the object's sum: on any error (or over `max_size`) nothing is left behind.
        `once`: never replace an object (identical bytes: `created=False`; other bytes: `Exists`).
        `describe`: what to record instead of the sum and size of `chunks`, called once they are exhausted
        (the encryption wrapper records the plaintext's). `expected`: what the client declared the object to be
        (sum and size); anything else is `Mismatch` and stores nothing. A backend may record it before the body
        is in (S3: a multipart upload straight to the key, no staging copy)."""
        ...

    async def open(self, key: str) -> AsyncIterator[bytes] | None: ...

    async def read(self, key: str) -> Opened | None:
        """The object and what is recorded with it; None when it does not exist."""
        ...

    async def stat(self, key: str) -> ObjectInfo | None: ...

    async def exists(self, key: str) -> bool: ...

    async def delete(self, key: str) -> None: ...

    async def delete_many(self, keys: Iterable[str]) -> None:
        """Delete every key (a missing one is fine); every key is checked before any is deleted. Raises
        DeleteFailed naming the keys that could not be deleted, after trying them all."""
        ...

    async def list(self, prefix: str) -> list[str]: ...

    async def sizes(self, prefix: str) -> dict[str, int]:
        """Stored bytes of every key under the directory-like `prefix` (what the backend holds, headers and
        encryption included): what quotas count."""
        ...


class Hashing:
    """Counts and hashes the bytes that stream through it, refusing more than `max_size`. `hashed=False`: counts only,
    for a storage told what to record (`describe`: encryption records the plaintext's sum, so hashing the
    ciphertext as well was a second SHA-256 pass over every encrypted upload, issue 31)."""

    def __init__(self, max_size: int, hashed: bool = True) -> None:
        self.max_size, self.size = max_size, 0
        self.digest = hashlib.sha256() if hashed else None

    def add(self, chunk: bytes) -> bytes:
        self.size += len(chunk)
        if self.size > self.max_size:
            raise TooLarge(self.max_size)
        if self.digest is not None:
            self.digest.update(chunk)
        return chunk

    def info(self) -> ObjectInfo:
        if self.digest is None:
            raise RuntimeError("Hashing(hashed=False) counts bytes only: the sum comes from `describe`")
        return ObjectInfo(self.digest.hexdigest(), self.size)


# The filesystem's object header: magic, version, the SHA-256 (32 bytes) and size (8 bytes) of the body. Written
# with the body into one temporary file that is then linked or renamed into place: the sum is atomic with it.
FS_MAGIC = b"BPYS"
FS_VERSION = 1
FS_HEADER = struct.Struct(">4sB32sQ")


def _fs_header(info: ObjectInfo) -> bytes:
    return FS_HEADER.pack(FS_MAGIC, FS_VERSION, bytes.fromhex(info.sha256), info.size)


def _parse_fs_header(data: bytes) -> ObjectInfo | None:
    if len(data) < FS_HEADER.size or not data.startswith(FS_MAGIC):
        return None
    _magic, version, digest, size = FS_HEADER.unpack(data[: FS_HEADER.size])
    if version != FS_VERSION:
        return None
    return ObjectInfo(digest.hex(), size)


class FilesystemStorage:
    """Files under `root`, each a header (the body's sum and size) then the body. A write goes to a temp file
    in the same directory, then `os.replace` (or, for a `once` write, `os.link`, which never replaces)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    async def put(self, key: str, chunks: AsyncIterator[bytes], max_size: int, *, once: bool = False,
                  describe: Describe | None = None, expected: ObjectInfo | None = None) -> Stored:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=f".{uuid.uuid4().hex}.tmp", dir=target.parent)
        tmp = Path(tmp_name)
        hashing = Hashing(max_size, hashed=describe is None)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(bytes(FS_HEADER.size))  # the header is written once the body's sum is known
                # Written a chunk (1 MiB) at a time: a body arrives in pieces of tens of KiB, and a worker-thread
                # trip per piece cost more than the writes.
                pending = bytearray()
                async for chunk in chunks:
                    pending += hashing.add(chunk)
                    if len(pending) >= CHUNK:
                        await anyio.to_thread.run_sync(handle.write, bytes(pending))
                        pending.clear()
                if pending:
                    await anyio.to_thread.run_sync(handle.write, bytes(pending))
                info = describe() if describe is not None else hashing.info()
                check_expected(expected, info)
                handle.seek(0)
                handle.write(_fs_header(info))
                handle.flush()
                os.fsync(handle.fileno())
            if not once:
                os.replace(tmp, target)
                return Stored(info.size, info.sha256)
            try:
                os.link(tmp, target)  # atomic: fails when the key exists, whatever raced us to it
            except FileExistsError:
                existing = await self.stat(key)
                if existing is not None and existing.sha256 == info.sha256:
                    return Stored(info.size, info.sha256, created=False)
                raise Exists(key, existing.sha256 if existing is not None else "unknown") from None
            finally:
                tmp.unlink(missing_ok=True)
            return Stored(info.size, info.sha256)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    @staticmethod
    def _read_header(handle: Any) -> ObjectInfo:
        """The recorded info of an open object, its handle left at the body; an object stored before headers
        existed gets its sum computed (and is read from its start)."""
        info = _parse_fs_header(handle.read(FS_HEADER.size))
        if info is not None:
            return info
        handle.seek(0)
        digest, size = hashlib.sha256(), 0
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
        handle.seek(0)
        return ObjectInfo(digest.hexdigest(), size, recorded=False)

    async def read(self, key: str) -> Opened | None:
        target = self._path(key)

        def start() -> tuple[Any, ObjectInfo, bytes] | None:
            """Open, read the header and the first chunk in one trip to a worker thread: a plan or log of up to
            a chunk (most of them) then costs one thread hop, not three (issue 31: the hops were the cost)."""
            try:
                handle = target.open("rb")  # opened now: a missing object is known before streaming
            except FileNotFoundError:
                return None
            try:
                info = self._read_header(handle)
                first = handle.read(CHUNK)
                if len(first) < CHUNK:  # a regular file reads short only at its end
                    handle.close()
            except BaseException:
                handle.close()
                raise
            return handle, info, first

        started = await anyio.to_thread.run_sync(start)
        if started is None:
            return None
        handle, info, first = started

        async def stream() -> AsyncIterator[bytes]:
            try:
                if first:
                    yield first
                if len(first) < CHUNK:
                    return
                while chunk := await anyio.to_thread.run_sync(handle.read, CHUNK):
                    yield chunk
            finally:
                handle.close()  # closing twice is fine

        return Opened(info, stream())

    async def open(self, key: str) -> AsyncIterator[bytes] | None:
        opened = await self.read(key)
        return opened.stream if opened is not None else None

    async def stat(self, key: str) -> ObjectInfo | None:
        target = self._path(key)

        def look() -> ObjectInfo | None:
            try:
                with target.open("rb") as handle:
                    return self._read_header(handle)
            except FileNotFoundError:
                return None

        return await anyio.to_thread.run_sync(look)

    async def sizes(self, prefix: str) -> dict[str, int]:
        base = self._path(prefix.rstrip("/"))

        def walk() -> dict[str, int]:
            if not base.is_dir():
                return {}
            found: dict[str, int] = {}
            for path in base.rglob("*"):
                if path.name.endswith(".tmp"):
                    continue
                try:
                    if path.is_file():
                        found[str(path.relative_to(self.root))] = path.stat().st_size
                except FileNotFoundError:  # deleted meanwhile
                    continue
            return found

        return await anyio.to_thread.run_sync(walk)

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
        # os.walk, not Path.rglob: a run's few directories, listed on every "latest attempt" read, cost about a
        # tenth of the time (still on the event loop: a handful of scandir calls).
        root = str(self.root)
        return sorted(
            os.path.relpath(os.path.join(directory, name), root)
            for directory, _, files in os.walk(base)
            for name in files
            if not name.endswith(".tmp")
        )
