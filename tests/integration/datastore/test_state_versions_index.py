"""A layer's state versions listing reads one object, the versions index (docs/architecture.md §10.6), on both
backends, over HTTP: the index a crash left behind, a store from before the index, versions removed behind its back
and a replica's late update are all listed exactly as stored, and repaired by the listing."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from burrito_py.datastore.auth import Principal
from burrito_py.datastore.encryption import EncryptedStorage, Keyring
from burrito_py.datastore.in_process import running_datastore
from burrito_py.datastore.state import parse_state, version_key
from burrito_py.datastore.state_routes import StateStore
from burrito_py.datastore.storage import Describe, FilesystemStorage, ObjectInfo, Opened, Storage, Stored
from tests.integration.datastore.auth_platform import NS
from tests.integration.datastore.conftest import S3Bucket
from tests.integration.datastore.test_state_backend import post, tfstate

APP = f"/api/v1/layers/{NS}/app/state"
PREFIX = f"states/{NS}/app"
INDEX = f"{PREFIX}/versions/index.json"


class Counting:
    """A Storage that counts the objects read and the listings, and fails the writes of the keys in `failing` (a
    process that died right before them, as far as what is stored goes)."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.reads: list[str] = []
        self.lists = 0
        self.failing: set[str] = set()

    def reset(self) -> None:
        self.reads, self.lists = [], 0

    async def put(self, key: str, chunks: AsyncIterator[bytes], max_size: int, *, once: bool = False,
                  describe: Describe | None = None, expected: ObjectInfo | None = None) -> Stored:
        if key in self.failing:
            raise OSError(f"{key}: the datastore died before writing it")
        return await self.inner.put(key, chunks, max_size, once=once, describe=describe, expected=expected)

    async def open(self, key: str) -> AsyncIterator[bytes] | None:
        self.reads.append(key)
        return await self.inner.open(key)

    async def read(self, key: str) -> Opened | None:
        self.reads.append(key)
        return await self.inner.read(key)

    async def stat(self, key: str) -> ObjectInfo | None:
        return await self.inner.stat(key)

    async def exists(self, key: str) -> bool:
        return await self.inner.exists(key)

    async def delete(self, key: str) -> None:
        await self.inner.delete(key)

    async def delete_many(self, keys: Iterable[str]) -> None:
        await self.inner.delete_many(keys)

    async def list(self, prefix: str) -> list[str]:
        self.lists += 1
        return await self.inner.list(prefix)

    async def sizes(self, prefix: str) -> dict[str, int]:
        return await self.inner.sizes(prefix)


@pytest.fixture(params=["filesystem", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Counting:
    if request.param == "s3":
        bucket: S3Bucket = request.getfixturevalue("s3_bucket")
        return Counting(bucket.storage())
    return Counting(FilesystemStorage(tmp_path / "data"))


def versions(url: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}{APP}/versions")
    assert answer.status_code == 200, answer.text
    return list(answer.json())


def seed(storage: Storage, serials: Iterable[int], record: bool = True) -> None:
    """Versions as a datastore from before the index wrote them (the state, then its record), or, without `record`,
    as a write that died between its state and its record left them."""
    async def write() -> None:
        state = StateStore(storage, PREFIX)
        for serial in serials:
            body = tfstate(serial, resources=serial)

            async def once(body: bytes = body) -> AsyncIterator[bytes]:
                yield body

            await storage.put(version_key(PREFIX, serial), once(), 1 << 20, once=True)
            if record:
                await state.write_meta(parse_state(body), Principal("old-datastore", admin=True),
                                       datetime(2026, 11, 1, tzinfo=UTC))

    asyncio.run(write())


def test_a_listing_reads_the_index_only_whatever_the_number_of_versions(tmp_path: Path, storage: Counting) -> None:
    with running_datastore(tmp_path / "data", storage=storage, state_versions_kept=5) as url:
        for serial in range(1, 9):
            assert post(f"{url}{APP}", tfstate(serial, resources=serial)).status_code == 200
        rollback = httpx.post(f"{url}{APP}", content=tfstate(9, resources=4),
                              params={"rollbackOf": 4, "requestedBy": "alice"})
        assert rollback.status_code == 200, rollback.text
        storage.reset()
        listed = versions(url)
        assert storage.reads == [INDEX] and storage.lists == 1
    assert [r["serial"] for r in listed] == [5, 6, 7, 8, 9]  # retention's deletions are in the index too
    assert [r["resources"] for r in listed] == [5, 6, 7, 8, 4]
    assert all(r["writer"] and r["created"] for r in listed)
    assert (listed[-1]["rollbackOf"], listed[-1]["requestedBy"]) == (4, "alice")


def test_a_crash_between_the_version_and_the_index_is_repaired_by_the_next_listing(
        tmp_path: Path, storage: Counting) -> None:
    with running_datastore(tmp_path / "data", storage=storage) as url:
        for serial in (1, 2):
            assert post(f"{url}{APP}", tfstate(serial)).status_code == 200
        storage.failing.add(INDEX)
        third = post(f"{url}{APP}", tfstate(3))
        assert third.status_code == 200, third.text  # the version is stored: the index is only a cache
        storage.failing.clear()
        storage.reset()
        assert [r["serial"] for r in versions(url)] == [1, 2, 3]
        assert sorted(storage.reads) == sorted([INDEX, version_key(PREFIX, 3, ".json"), INDEX])  # read, then again
        storage.reset()                                                                          # under the guard
        assert [r["serial"] for r in versions(url)] == [1, 2, 3]
        assert storage.reads == [INDEX]  # repaired


def test_a_write_that_died_before_its_record_is_listed_from_its_state_and_completed_by_its_retry(
        tmp_path: Path, storage: Counting) -> None:
    with running_datastore(tmp_path / "data", storage=storage) as url:
        assert post(f"{url}{APP}", tfstate(1)).status_code == 200
        seed(storage, [2], record=False)  # the state of serial 2 stored, then the process died
        listed = versions(url)
        assert [r["serial"] for r in listed] == [1, 2]
        assert listed[1]["resources"] == 2 and listed[1]["sha256"] and "writer" not in listed[1]
        assert post(f"{url}{APP}", tfstate(2, resources=2)).status_code == 200  # Terraform's retry: same bytes
        storage.reset()
        listed = versions(url)
        assert storage.reads == [INDEX]
    assert listed[1]["writer"] and listed[1]["created"]


def test_a_store_from_before_the_index_lists_the_same_and_is_indexed_once(tmp_path: Path, storage: Counting) -> None:
    seed(storage, range(1, 31))
    with running_datastore(tmp_path / "data", storage=storage) as url:
        storage.reset()
        first = versions(url)
        assert len(storage.reads) == 2 + 30  # no index (read twice), then every record once
        storage.reset()
        assert versions(url) == first
        assert storage.reads == [INDEX]
        assert post(f"{url}{APP}", tfstate(31)).status_code == 200
        storage.reset()
        listed = versions(url)
        assert storage.reads == [INDEX]
    assert [r["serial"] for r in listed] == list(range(1, 32))
    assert {r["writer"] for r in listed[:30]} == {"old-datastore"} and listed[30]["writer"] != "old-datastore"
    assert all(r["resources"] == r["serial"] for r in listed[:30])


def test_the_index_never_invents_a_version_removed_behind_its_back(tmp_path: Path, storage: Counting) -> None:
    with running_datastore(tmp_path / "data", storage=storage) as url:
        for serial in range(1, 6):
            assert post(f"{url}{APP}", tfstate(serial)).status_code == 200
        # Retention's deletion done, its index update lost (or an admin deleting a version by hand).
        asyncio.run(storage.delete_many([version_key(PREFIX, 2, suffix) for suffix in (".json", ".tfstate")]))
        storage.reset()
        assert [r["serial"] for r in versions(url)] == [1, 3, 4, 5]
        assert storage.reads == [INDEX, INDEX]  # nothing to read: the index is rewritten without serial 2
        storage.reset()
        assert [r["serial"] for r in versions(url)] == [1, 3, 4, 5]
        assert storage.reads == [INDEX]


def test_a_replicas_late_index_update_loses_nothing(tmp_path: Path, storage: Counting) -> None:
    with running_datastore(tmp_path / "data", storage=storage) as url:
        for serial in range(1, 4):
            assert post(f"{url}{APP}", tfstate(serial)).status_code == 200
        old = asyncio.run(StateStore(storage, PREFIX).index())
        assert old is not None
        for serial in (4, 5):
            assert post(f"{url}{APP}", tfstate(serial)).status_code == 200
        asyncio.run(StateStore(storage, PREFIX).write_index(old))  # another replica's write, from before 4 and 5
        assert [r["serial"] for r in versions(url)] == [1, 2, 3, 4, 5]
        assert [r["serial"] for r in versions(url)] == [1, 2, 3, 4, 5]


def test_two_replicas_writing_at_once_list_exactly_what_is_stored(tmp_path: Path) -> None:
    """Two datastores on one store, each serialising only its own requests: their index updates race, and whatever
    the order, each lists every stored version."""
    shared = FilesystemStorage(tmp_path / "data")
    with running_datastore(tmp_path / "data", storage=shared) as one, \
            running_datastore(tmp_path / "data", storage=shared) as two:
        def writer(url: str, serials: range) -> None:
            for serial in serials:
                post(f"{url}{APP}", tfstate(serial))  # a lower serial than the other's newest is a 409: fine

        threads = [threading.Thread(target=writer, args=(url, range(start, 60, 2)))
                   for url, start in ((one, 1), (two, 2))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stored = sorted(int(p.name.split(".")[0]) for p in (tmp_path / "data" / PREFIX / "versions").glob("*.tfstate"))
        assert len(stored) > 10
        assert [r["serial"] for r in versions(one)] == stored
        assert [r["serial"] for r in versions(two)] == stored


def test_the_index_is_encrypted_at_rest_as_the_records_are(tmp_path: Path) -> None:
    storage = EncryptedStorage(FilesystemStorage(tmp_path / "data"), Keyring({"a": os.urandom(32)}, "a"))
    with running_datastore(tmp_path / "data", storage=storage) as url:
        for serial in (1, 2):
            assert post(f"{url}{APP}", tfstate(serial)).status_code == 200
        assert [r["serial"] for r in versions(url)] == [1, 2]
    stored = (tmp_path / "data" / INDEX).read_bytes()
    assert b"lineage-1" not in stored and b"serial" not in stored


def test_a_listing_under_concurrent_writes_shows_a_consistent_prefix(tmp_path: Path) -> None:
    """Listings while versions are written (one replica): each answer is the versions stored at some moment, in order,
    every record complete."""
    storage = FilesystemStorage(tmp_path / "data")
    seen: list[list[int]] = []
    with running_datastore(tmp_path / "data", storage=storage, state_versions_kept=10) as url:
        done = threading.Event()

        def lister() -> None:  # what it sees is checked below, in the test's thread
            while not done.is_set():
                answer = httpx.get(f"{url}{APP}/versions")
                listed = answer.json() if answer.status_code == 200 else [{"status": answer.status_code}]
                seen.append([r.get("serial", -1) for r in listed if r.get("writer")])
                seen.append([r.get("serial", -1) for r in listed])

        thread = threading.Thread(target=lister)
        thread.start()
        try:
            for serial in range(1, 31):
                assert post(f"{url}{APP}", tfstate(serial)).status_code == 200
        finally:
            done.set()
            thread.join()
        assert [r["serial"] for r in versions(url)] == list(range(21, 31))
    assert len(seen) > 2
    for with_writer, every in zip(seen[::2], seen[1::2], strict=True):
        assert with_writer == every  # every record complete
        if every:
            assert every == list(range(every[0], every[0] + len(every)))
        assert len(every) <= 11
