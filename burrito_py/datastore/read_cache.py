"""The datastore's read cache (docs/architecture.md §10.8): small attempt objects and run listings kept in this
process's memory for a short TTL, size-bounded, invalidated exactly by this process's own writes and deletes.

It is a `Storage` wrapper, so it sits where storage is called: after the routes' authorization (a cache hit is
authorized as a miss is), above encryption (what it holds is plaintext, in the memory that already holds the
keys), and beneath retention and every route that writes or deletes (they all go through it, so each of their
writes and deletes drops what it changed). Only what a run's routes read is cached: an attempt's objects
(`layers/<ns>/<layer>/<run>/<n>/<file>`) and a run's listing (`layers/<ns>/<layer>/<run>`, the "latest attempt"
routes). Managed state, its lock, source archives and the quotas' sizes are always read from the backend."""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from burrito_py.datastore.storage import Describe, ObjectInfo, Opened, Storage, Stored

_ATTEMPT_OBJECT = re.compile(r"^layers/[^/]+/[^/]+/[^/]+/[0-9]+/[^/]+$")
_RUN_PREFIX = re.compile(r"^layers/[^/]+/[^/]+/[^/]+$")
# What a listing's entry costs beyond its keys' characters (the list, the strings' headers), counted against the
# byte bound so that many small listings cannot hold unbounded memory.
_LISTING_OVERHEAD = 64
_KEY_OVERHEAD = 56
R = TypeVar("R")  # what a read through the cache returns to its caller
S = TypeVar("S")  # what its flight shares with the reads that joined it, and the cache is filled with


def cacheable_object(key: str) -> bool:
    return _ATTEMPT_OBJECT.fullmatch(key) is not None


def cacheable_listing(prefix: str) -> bool:
    return _RUN_PREFIX.fullmatch(prefix) is not None


def ancestors(key: str) -> list[str]:
    """Every directory-like prefix a listing of which holds `key` (`a/b/c` → `a`, `a/b`), and the key itself."""
    parts = key.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


@dataclass(frozen=True, slots=True)
class Held(Opened):
    """An object read whole into memory (`stream` yields `data`): answered as one body, no streaming."""

    data: bytes = b""


@dataclass(frozen=True, slots=True)
class _Entry:
    expires: float
    size: int  # what it counts against the byte bound
    info: ObjectInfo | None = None
    data: bytes = b""
    keys: tuple[str, ...] = ()


class ReadCache:
    """The bookkeeping, without I/O: one LRU of objects and listings under one byte bound, each entry served until
    its TTL passes. A fill (a read from the backend that may become an entry) is registered when it starts and
    dropped by any invalidation of its name meanwhile, so a read that began before a write and ends after it can
    never put the old bytes back."""

    def __init__(self, max_bytes: int, max_object_bytes: int, ttl_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes, self.max_object_bytes, self.ttl = max_bytes, max_object_bytes, ttl_seconds
        self.clock = clock
        self.held = 0
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._fills: dict[str, set[object]] = {}
        self.hits = self.misses = 0
        self.on_invalidate: Callable[[str], None] = lambda name: None

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0 and self.ttl > 0

    # -- lookups -----------------------------------------------------------------------------------------------
    def _get(self, name: str) -> _Entry | None:
        entry = self._entries.get(name)
        if entry is None:
            self.misses += 1
            return None
        if self.clock() >= entry.expires:
            self._drop(name)
            self.misses += 1
            return None
        self._entries.move_to_end(name)
        self.hits += 1
        return entry

    def get_object(self, key: str) -> tuple[ObjectInfo, bytes] | None:
        entry = self._get("o:" + key)
        return (entry.info, entry.data) if entry is not None and entry.info is not None else None

    def get_listing(self, prefix: str) -> list[str] | None:
        entry = self._get("l:" + prefix)
        return list(entry.keys) if entry is not None else None

    # -- fills -------------------------------------------------------------------------------------------------
    def begin(self, name: str) -> object:
        token = object()
        self._fills.setdefault(name, set()).add(token)
        return token

    def _end(self, name: str, token: object) -> bool:
        """Whether the fill `token` of `name` is still valid (nothing invalidated `name` since it began)."""
        tokens = self._fills.get(name)
        if tokens is None or token not in tokens:
            return False
        tokens.discard(token)
        if not tokens:
            del self._fills[name]
        return True

    def abandon(self, name: str, token: object) -> None:
        self._end(name, token)

    def fill_object(self, key: str, token: object, info: ObjectInfo, data: bytes) -> None:
        name = "o:" + key
        if self._end(name, token) and len(data) == info.size and len(data) <= self.max_object_bytes:
            self._put(name, _Entry(self.clock() + self.ttl, len(data) + len(key) + _KEY_OVERHEAD, info, data))

    def fill_listing(self, prefix: str, token: object, keys: list[str]) -> None:
        name = "l:" + prefix
        if self._end(name, token):
            size = _LISTING_OVERHEAD + len(prefix) + sum(len(k) + _KEY_OVERHEAD for k in keys)
            self._put(name, _Entry(self.clock() + self.ttl, size, keys=tuple(keys)))

    def _put(self, name: str, entry: _Entry) -> None:
        if entry.size > self.max_bytes:
            return
        self._drop(name)
        self._entries[name] = entry
        self.held += entry.size
        while self.held > self.max_bytes:
            oldest = next(iter(self._entries))
            self._drop(oldest)

    def _drop(self, name: str) -> None:
        entry = self._entries.pop(name, None)
        if entry is not None:
            self.held -= entry.size

    # -- invalidation ------------------------------------------------------------------------------------------
    def invalidate(self, key: str) -> None:
        """`key` was written or deleted: drop it, every listing that could hold it, and their fills in flight."""
        for name in ("o:" + key, *("l:" + prefix for prefix in ancestors(key))):
            self._drop(name)
            self._fills.pop(name, None)
            self.on_invalidate(name)


class CachedStorage:
    """A `Storage` that answers reads of attempt objects and run listings from a `ReadCache` (see the module doc)."""

    def __init__(self, inner: Storage, cache: ReadCache) -> None:
        self.inner, self.cache = inner, cache
        # Reads of the backend in flight, by entry name: later misses of the same name wait for it. Dropped by an
        # invalidation, so a request that starts after a write never joins a read that began before it.
        self._flights: dict[str, asyncio.Future[object]] = {}
        cache.on_invalidate = self._land_nothing

    def _land_nothing(self, name: str) -> None:
        self._flights.pop(name, None)

    async def put(self, key: str, chunks: AsyncIterator[bytes], max_size: int, *, once: bool = False,
                  describe: Describe | None = None, expected: ObjectInfo | None = None) -> Stored:
        try:
            return await self.inner.put(key, chunks, max_size, once=once, describe=describe, expected=expected)
        finally:  # failed or not: whatever the backend holds now is read again
            self.cache.invalidate(key)

    async def read(self, key: str) -> Opened | None:
        if not cacheable_object(key):
            return await self.inner.read(key)
        hit = self.cache.get_object(key)
        if hit is not None:
            return Held(hit[0], _once(hit[1]), hit[1])
        name = "o:" + key
        shared = await self._joined(name)
        if isinstance(shared, tuple):
            return Held(shared[0], _once(shared[1]), shared[1])
        if shared is _MISSING:
            return None
        if shared is _OWN:
            return await self.inner.read(key)  # what the flight read could not be shared (too large, or failed)

        async def read_whole() -> tuple[Opened | None, tuple[ObjectInfo, bytes] | _Unshared]:
            opened = await self.inner.read(key)
            if opened is None:
                return None, _MISSING
            if opened.info.size > self.cache.max_object_bytes:
                return opened, _OWN
            data = b"".join([chunk async for chunk in opened.stream])
            return Held(opened.info, _once(data), data), (opened.info, data)

        return await self._lead(name, read_whole, lambda token, held: self.cache.fill_object(key, token, *held))

    async def _joined(self, name: str) -> object:
        """What a read of `name` already in flight gets (None when none is: this one leads). Concurrent misses of
        one object share one backend read, so an entry's expiry under load costs one read, not one per client."""
        flight = self._flights.get(name)
        return None if flight is None else await asyncio.shield(flight)

    async def _lead(self, name: str, read: Callable[[], Awaitable[tuple[R, S | _Unshared]]],
                    fill: Callable[[object, S], None]) -> R:
        """Lead the backend read of `name` that later misses of it join (`_joined`). `read` returns what this caller
        gets and what they get: a value, which `fill(token, value)` then caches (unless an invalidation dropped the
        fill meanwhile), or an `_Unshared` answer, which abandons the fill. A read that fails abandons it too, and
        sends the joiners to read for themselves."""
        flight: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._flights[name] = flight
        token = self.cache.begin(name)
        try:
            result, shared = await read()
        except BaseException:
            self.cache.abandon(name, token)
            _land(flight, _OWN)
            raise
        finally:
            if self._flights.get(name) is flight:  # else an invalidation dropped it (and a later miss may lead)
                del self._flights[name]
        if isinstance(shared, _Unshared):
            self.cache.abandon(name, token)
        else:
            fill(token, shared)
        _land(flight, shared)
        return result

    async def open(self, key: str) -> AsyncIterator[bytes] | None:
        opened = await self.read(key)
        return opened.stream if opened is not None else None

    async def stat(self, key: str) -> ObjectInfo | None:
        hit = self.cache.get_object(key) if cacheable_object(key) else None
        return hit[0] if hit is not None else await self.inner.stat(key)

    async def exists(self, key: str) -> bool:
        return await self.inner.exists(key)

    async def delete(self, key: str) -> None:
        try:
            await self.inner.delete(key)
        finally:
            self.cache.invalidate(key)

    async def delete_many(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        try:
            await self.inner.delete_many(keys)
        finally:  # some may be gone even when others failed
            for key in keys:
                self.cache.invalidate(key)

    async def list(self, prefix: str) -> list[str]:
        base = prefix.strip("/")
        if not cacheable_listing(base):
            return await self.inner.list(prefix)
        hit = self.cache.get_listing(base)
        if hit is not None:
            return hit
        name = "l:" + base
        shared = await self._joined(name)
        if isinstance(shared, list):
            return list(shared)
        if shared is _OWN:
            return await self.inner.list(prefix)

        async def list_keys() -> tuple[list[str], list[str]]:
            keys = await self.inner.list(prefix)
            return list(keys), keys  # the joiners copy what is shared: nobody holds the caller's list

        return await self._lead(name, list_keys, lambda token, keys: self.cache.fill_listing(base, token, keys))

    async def sizes(self, prefix: str) -> dict[str, int]:
        return await self.inner.sizes(prefix)  # quotas count what the backend holds, never a cached view


class _Unshared:
    """A shared read's answer that is not a value: no such object (`_MISSING`), or read it yourself (`_OWN`)."""


_MISSING, _OWN = _Unshared(), _Unshared()


def _land(flight: asyncio.Future[object], result: object) -> None:
    if not flight.done():
        flight.set_result(result)


def with_read_cache(storage: Storage, max_bytes: int, max_object_bytes: int, ttl_seconds: float) -> Storage:
    """`storage` behind a read cache, or as it is when the cache is off (no bytes, or no TTL)."""
    cache = ReadCache(max_bytes, max_object_bytes, ttl_seconds)
    return CachedStorage(storage, cache) if cache.enabled else storage


def innermost(storage: object) -> object:
    """The backend beneath every wrapper (read cache, encryption): where backend-only calls (S3's sweeps) are."""
    while (inner := getattr(storage, "inner", None)) is not None:
        storage = inner
    return storage


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data
