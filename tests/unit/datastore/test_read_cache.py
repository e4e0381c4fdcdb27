"""The datastore's read cache (read_cache.py): TTL, byte bound, exact invalidation, fills raced by writes; over an
in-memory backend and a fake clock."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.datastore.read_cache import CachedStorage, ReadCache, ancestors, innermost, with_read_cache
from burrito_py.datastore.storage import Describe, ObjectInfo, Opened, Stored

PLAN = "layers/team/app/app-run-1/1/plan.json"
RUN = "layers/team/app/app-run-1"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def info(data: bytes) -> ObjectInfo:
    return ObjectInfo(hashlib.sha256(data).hexdigest(), len(data))


class Memory:
    """A backend in a dict, counting its reads and listings; `gate` holds reads until it is set."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.reads = self.listings = 0
        self.gate: asyncio.Event | None = None

    async def put(self, key: str, chunks: AsyncIterator[bytes], max_size: int, *, once: bool = False,
                  describe: Describe | None = None, expected: ObjectInfo | None = None) -> Stored:
        data = b"".join([chunk async for chunk in chunks])
        self.objects[key] = data
        return Stored(len(data), info(data).sha256)

    async def read(self, key: str) -> Opened | None:
        self.reads += 1
        data = self.objects.get(key)
        if self.gate is not None:
            await self.gate.wait()
        if data is None:
            return None
        return Opened(info(data), _chunks(data))

    async def open(self, key: str) -> AsyncIterator[bytes] | None:
        opened = await self.read(key)
        return opened.stream if opened else None

    async def stat(self, key: str) -> ObjectInfo | None:
        return info(self.objects[key]) if key in self.objects else None

    async def exists(self, key: str) -> bool:
        return key in self.objects

    async def delete(self, key: str) -> None:
        self.objects.pop(key, None)

    async def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.objects.pop(key, None)

    async def list(self, prefix: str) -> list[str]:
        self.listings += 1
        base = prefix.strip("/") + "/"
        return sorted(k for k in self.objects if k.startswith(base))

    async def sizes(self, prefix: str) -> dict[str, int]:
        base = prefix.strip("/") + "/"
        return {k: len(v) for k, v in self.objects.items() if k.startswith(base)}


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(data), 3):  # several chunks: the cache must join them
        yield data[i : i + 3]


async def _body(data: bytes) -> AsyncIterator[bytes]:
    yield data


def cached(memory: Memory, clock: Clock, max_bytes: int = 1 << 20, max_object: int = 1 << 16,
           ttl: float = 5.0) -> CachedStorage:
    return CachedStorage(memory, ReadCache(max_bytes, max_object, ttl, clock))  # type: ignore[arg-type]


async def read(storage: CachedStorage, key: str) -> bytes | None:
    opened = await storage.read(key)
    return None if opened is None else b"".join([chunk async for chunk in opened.stream])


def test_a_read_is_served_from_memory_until_its_ttl_passes() -> None:
    memory, clock = Memory(), Clock()
    memory.objects[PLAN] = b"plan one"
    storage = cached(memory, clock)

    async def scenario() -> None:
        assert await read(storage, PLAN) == b"plan one"
        assert await read(storage, PLAN) == b"plan one"
        assert memory.reads == 1
        assert (await storage.stat(PLAN)) == info(b"plan one")
        memory.objects[PLAN] = b"rewritten behind its back"  # another replica's write
        clock.now += 4.9
        assert await read(storage, PLAN) == b"plan one"  # within the TTL: the documented staleness
        clock.now += 0.1
        assert await read(storage, PLAN) == b"rewritten behind its back"
        assert memory.reads == 2

    asyncio.run(scenario())


def test_own_writes_and_deletes_are_seen_at_once() -> None:
    memory, clock = Memory(), Clock()
    storage = cached(memory, clock)

    async def scenario() -> None:
        await storage.put(PLAN, _body(b"first"), 100)
        assert await read(storage, PLAN) == b"first"
        assert await storage.list(RUN) == [PLAN]
        await storage.put(PLAN, _body(b"rewritten by the controllers"), 100)
        assert await read(storage, PLAN) == b"rewritten by the controllers"
        second = f"{RUN}/2/plan.json"
        await storage.put(second, _body(b"attempt two"), 100)
        assert await storage.list(RUN) == [PLAN, second]
        await storage.delete(second)
        assert await storage.list(RUN) == [PLAN]
        assert await read(storage, second) is None
        await storage.delete_many([PLAN])
        assert await read(storage, PLAN) is None
        assert await storage.list(RUN) == []

    asyncio.run(scenario())


def test_a_read_that_began_before_a_write_never_puts_the_old_bytes_back() -> None:
    memory, clock = Memory(), Clock()
    memory.objects[PLAN] = b"old"
    storage = cached(memory, clock)

    async def scenario() -> None:
        memory.gate = asyncio.Event()
        slow = asyncio.create_task(read(storage, PLAN))
        await asyncio.sleep(0)  # the slow read has taken the old bytes and waits
        memory.gate.set()
        memory.gate = None
        await storage.put(PLAN, _body(b"new"), 100)
        assert await slow == b"old"  # what was stored when it began
        assert await read(storage, PLAN) == b"new"

    asyncio.run(scenario())


def test_a_listing_that_began_before_a_write_is_not_kept() -> None:
    memory, clock = Memory(), Clock()
    memory.objects[PLAN] = b"one"
    storage = cached(memory, clock)
    second = f"{RUN}/2/plan.json"

    async def scenario() -> None:
        started = asyncio.Event()
        release = asyncio.Event()
        listing = Memory.list

        async def slow_list(self: Memory, prefix: str) -> list[str]:
            keys = await listing(self, prefix)
            started.set()
            await release.wait()
            return keys

        memory.list = slow_list.__get__(memory)  # type: ignore[method-assign]
        pending = asyncio.create_task(storage.list(RUN))
        await started.wait()
        await storage.put(second, _body(b"two"), 100)
        release.set()
        assert await pending == [PLAN]
        memory.list = listing.__get__(memory)  # type: ignore[method-assign]
        assert await storage.list(RUN) == [PLAN, second]

    asyncio.run(scenario())


def test_only_attempt_objects_and_run_listings_are_cached() -> None:
    memory, clock = Memory(), Clock()
    state = "states/team/app/lock.json"
    source = "sources/team/repo/revisions/abc"
    memory.objects.update({state: b"lock", source: b"tree", PLAN: b"plan"})
    storage = cached(memory, clock)

    async def scenario() -> None:
        for key in (state, source, state, source):
            await read(storage, key)
        assert memory.reads == 4
        await storage.list("layers")
        await storage.list("layers")
        await storage.list("states/team/app/versions")
        await storage.list("states/team/app/versions")
        assert memory.listings == 4
        assert await storage.sizes(RUN) == {PLAN: 4}  # quotas: always the backend's

    asyncio.run(scenario())


def test_objects_above_the_cap_are_streamed_and_not_kept() -> None:
    memory, clock = Memory(), Clock()
    memory.objects[PLAN] = b"x" * 100
    storage = cached(memory, clock, max_object=99)

    async def scenario() -> None:
        assert await read(storage, PLAN) == b"x" * 100
        assert await read(storage, PLAN) == b"x" * 100
        assert memory.reads == 2
        assert storage.cache.held == 0

    asyncio.run(scenario())


def test_a_missing_object_is_not_remembered() -> None:
    memory, clock = Memory(), Clock()
    storage = cached(memory, clock)

    async def scenario() -> None:
        assert await read(storage, PLAN) is None
        memory.objects[PLAN] = b"uploaded through another replica"
        assert await read(storage, PLAN) == b"uploaded through another replica"

    asyncio.run(scenario())


def test_off_when_no_bytes_or_no_ttl() -> None:
    memory = Memory()
    assert with_read_cache(memory, 0, 10, 5.0) is memory  # type: ignore[arg-type]
    assert with_read_cache(memory, 10, 10, 0.0) is memory  # type: ignore[arg-type]
    wrapped = with_read_cache(memory, 10, 10, 5.0)  # type: ignore[arg-type]
    assert isinstance(wrapped, CachedStorage) and innermost(wrapped) is memory


def test_ancestors() -> None:
    assert ancestors("layers/a/b/c/1/plan.json") == [
        "layers", "layers/a", "layers/a/b", "layers/a/b/c", "layers/a/b/c/1", "layers/a/b/c/1/plan.json"]


_keys = st.sampled_from([f"layers/ns/app/run-{r}/{n}/plan.json" for r in range(3) for n in range(3)])
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("fill"), _keys, st.binary(max_size=40)),
        st.tuples(st.just("invalidate"), _keys, st.just(b"")),
        st.tuples(st.just("tick"), _keys, st.just(b"")),
        st.tuples(st.just("get"), _keys, st.just(b"")),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops=_ops, max_bytes=st.integers(0, 400), ttl=st.floats(0.5, 5))
def test_the_cache_never_serves_what_was_invalidated_nor_holds_more_than_its_bound(
    ops: list[tuple[str, str, bytes]], max_bytes: int, ttl: float
) -> None:
    clock = Clock()
    cache = ReadCache(max_bytes, 30, ttl, clock)
    truth: dict[str, bytes | None] = {}  # the backend's bytes, as this process last wrote or filled them
    for op, key, data in ops:
        if op == "fill":
            token = cache.begin("o:" + key)
            truth[key] = data
            cache.fill_object(key, token, info(data), data)
        elif op == "invalidate":
            truth[key] = None
            cache.invalidate(key)
        elif op == "tick":
            clock.now += ttl / 3
        else:
            hit = cache.get_object(key)
            if hit is not None:
                assert hit[1] == truth[key] and len(hit[1]) <= 30
        assert 0 <= cache.held <= max_bytes
        assert cache.held == sum(entry.size for entry in cache._entries.values())


def test_a_fill_raced_by_an_invalidation_is_dropped() -> None:
    cache = ReadCache(1000, 100, 5, Clock())
    token = cache.begin("o:" + PLAN)
    other = cache.begin("o:" + PLAN)
    cache.invalidate(PLAN)
    cache.fill_object(PLAN, token, info(b"old"), b"old")
    cache.fill_object(PLAN, other, info(b"old"), b"old")
    assert cache.get_object(PLAN) is None
    listing = cache.begin("l:" + RUN)
    cache.invalidate(f"{RUN}/3/run.log")
    cache.fill_listing(RUN, listing, [PLAN])
    assert cache.get_listing(RUN) is None
    assert cache._fills == {}


def test_concurrent_misses_share_one_backend_read() -> None:
    memory, clock = Memory(), Clock()
    memory.objects[PLAN] = b"plan"
    storage = cached(memory, clock)

    async def scenario() -> None:
        memory.gate = asyncio.Event()
        readers = [asyncio.create_task(read(storage, PLAN)) for _ in range(20)]
        listings = [asyncio.create_task(storage.list(RUN)) for _ in range(20)]
        await asyncio.sleep(0)
        memory.gate.set()
        assert await asyncio.gather(*readers) == [b"plan"] * 20
        assert await asyncio.gather(*listings) == [[PLAN]] * 20
        assert memory.reads == 1 and memory.listings == 1
        clock.now += 5  # expired: again one read for all of them
        memory.gate = asyncio.Event()
        readers = [asyncio.create_task(read(storage, PLAN)) for _ in range(20)]
        await asyncio.sleep(0)
        memory.gate.set()
        assert await asyncio.gather(*readers) == [b"plan"] * 20
        assert memory.reads == 2

    asyncio.run(scenario())


def test_a_request_after_a_write_never_joins_a_read_that_began_before_it() -> None:
    memory, clock = Memory(), Clock()
    memory.objects[PLAN] = b"old"
    storage = cached(memory, clock)

    async def scenario() -> None:
        memory.gate = asyncio.Event()
        early = asyncio.create_task(read(storage, PLAN))
        joined = asyncio.create_task(read(storage, PLAN))  # overlaps the write: old or new is right
        await asyncio.sleep(0)
        gate, memory.gate = memory.gate, None
        await storage.put(PLAN, _body(b"new"), 100)
        late = asyncio.create_task(read(storage, PLAN))  # starts after the write: must see it
        await asyncio.sleep(0)
        gate.set()
        assert await early == b"old" and await joined in (b"old", b"new")
        assert await late == b"new"
        assert await read(storage, PLAN) == b"new"

    asyncio.run(scenario())


def test_a_shared_read_that_fails_or_is_too_large_is_read_by_each() -> None:
    memory, clock = Memory(), Clock()
    memory.objects[PLAN] = b"x" * 100
    storage = cached(memory, clock, max_object=10)

    async def scenario() -> None:
        memory.gate = asyncio.Event()
        readers = [asyncio.create_task(read(storage, PLAN)) for _ in range(3)]
        await asyncio.sleep(0)
        memory.gate.set()
        assert await asyncio.gather(*readers) == [b"x" * 100] * 3  # each streamed its own

    asyncio.run(scenario())
