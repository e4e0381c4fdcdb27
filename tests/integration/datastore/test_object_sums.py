"""Each object's SHA-256 is computed as it is stored and kept atomically with it, and a `once` write never
replaces an object (issue 24, design items 2 and 3): on the filesystem, on S3 (moto over HTTP, a single PutObject
and the staged multipart path), and through the encryption wrapper on both."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from burrito_py.datastore.encryption import EncryptedStorage, Keyring
from burrito_py.datastore.s3 import MIN_PART_SIZE, S3Storage
from burrito_py.datastore.storage import Exists, FilesystemStorage, Mismatch, ObjectInfo, Storage, TooLarge
from tests.integration.datastore.conftest import S3Bucket

KEY = "layers/default/app/app-plan-1/1/plan.bin"
BIG = MIN_PART_SIZE * 2 + 12345  # above one S3 part: staged multipart, then copied with its sum


async def _chunks(data: bytes, size: int = 1024 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(params=["filesystem", "s3", "encrypted-filesystem", "encrypted-s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    kind: str = request.param
    inner: Storage
    if kind.endswith("s3"):
        bucket: S3Bucket = request.getfixturevalue("s3_bucket")
        inner = bucket.storage()
    else:
        inner = FilesystemStorage(tmp_path / "data")
    if kind.startswith("encrypted"):
        return EncryptedStorage(inner, Keyring({"a": os.urandom(32)}, "a"))
    return inner


def _read(storage: Storage, key: str) -> tuple[bytes, str, int] | None:
    async def read() -> tuple[bytes, str, int] | None:
        opened = await storage.read(key)
        if opened is None:
            return None
        return b"".join([c async for c in opened.stream]), opened.info.sha256, opened.info.size

    return asyncio.run(read())


@pytest.mark.parametrize("size", [0, 5, BIG])
def test_the_sum_is_computed_while_storing_and_served_with_the_object(storage: Storage, size: int) -> None:
    data = os.urandom(size)
    stored = asyncio.run(storage.put(KEY, _chunks(data), BIG + 1))
    assert (stored.size, stored.sha256, stored.created) == (size, _sha(data), True)
    assert _read(storage, KEY) == (data, _sha(data), size)
    info = asyncio.run(storage.stat(KEY))
    assert info is not None and (info.sha256, info.size, info.recorded) == (_sha(data), size, True)
    assert asyncio.run(storage.stat("layers/default/app/app-plan-1/1/absent")) is None


@pytest.mark.parametrize("size", [5, BIG])
def test_a_once_object_takes_the_same_bytes_again_and_refuses_others(storage: Storage, size: int) -> None:
    first, other = os.urandom(size), os.urandom(size)
    assert asyncio.run(storage.put(KEY, _chunks(first), BIG + 1, once=True)).created
    again = asyncio.run(storage.put(KEY, _chunks(first), BIG + 1, once=True))
    assert (again.created, again.sha256) == (False, _sha(first))  # a retried upload: fine, nothing changes
    with pytest.raises(Exists) as refused:
        asyncio.run(storage.put(KEY, _chunks(other), BIG + 1, once=True))
    assert refused.value.sha256 == _sha(first)
    assert _read(storage, KEY) == (first, _sha(first), size)
    # Without `once` (the controllers), the object is replaced, its sum with it.
    replaced = asyncio.run(storage.put(KEY, _chunks(other), BIG + 1))
    assert replaced.created and _read(storage, KEY) == (other, _sha(other), size)


@pytest.mark.parametrize("size", [5, BIG])
def test_a_declared_sum_is_checked_and_a_wrong_one_stores_nothing(storage: Storage, size: int) -> None:
    """X-Burrito-Sha256 with Content-Length (issue 31): on S3 a large body goes straight to its key with the
    declared sum in the upload's metadata; the body must still hash to it, or nothing becomes visible."""
    data, other = os.urandom(size), os.urandom(size)
    declared = ObjectInfo(_sha(data), size)
    with pytest.raises(Mismatch):
        asyncio.run(storage.put(KEY, _chunks(other), BIG + 1, once=True, expected=declared))
    with pytest.raises(Mismatch):  # the right bytes, one short
        asyncio.run(storage.put(KEY, _chunks(data[:-1]), BIG + 1, once=True, expected=declared))
    assert _read(storage, KEY) is None
    stored = asyncio.run(storage.put(KEY, _chunks(data), BIG + 1, once=True, expected=declared))
    assert (stored.size, stored.sha256, stored.created) == (size, _sha(data), True)
    assert _read(storage, KEY) == (data, _sha(data), size)
    # A retried upload with its sum is fine; other bytes with their own true sum are still refused (written once).
    again = asyncio.run(storage.put(KEY, _chunks(data), BIG + 1, once=True, expected=declared))
    assert again.created is False
    with pytest.raises(Exists):
        asyncio.run(storage.put(KEY, _chunks(other), BIG + 1, once=True, expected=ObjectInfo(_sha(other), size)))
    assert _read(storage, KEY) == (data, _sha(data), size)
    inner = getattr(storage, "inner", storage)
    if isinstance(inner, S3Storage):  # no staging copy was made, and no upload is left open
        listed = inner.client.list_objects_v2(Bucket=inner.bucket).get("Contents", [])
        assert [item["Key"] for item in listed] == [inner.prefix + KEY]
        assert inner.client.list_multipart_uploads(Bucket=inner.bucket).get("Uploads", []) == []


def test_racing_once_writes_leave_exactly_one_object_with_its_own_sum(storage: Storage) -> None:
    bodies = [os.urandom(1000) for _ in range(6)]

    async def race() -> list[object]:
        return await asyncio.gather(*(storage.put(KEY, _chunks(b), 10_000, once=True) for b in bodies),
                                    return_exceptions=True)

    outcomes = asyncio.run(race())
    winners = [b for b, o in zip(bodies, outcomes, strict=True) if not isinstance(o, BaseException)]
    assert len(winners) == 1, outcomes
    assert all(isinstance(o, Exists) for o in outcomes if isinstance(o, BaseException))
    assert _read(storage, KEY) == (winners[0], _sha(winners[0]), 1000)


def test_a_refused_once_write_over_the_limit_changes_nothing(storage: Storage) -> None:
    asyncio.run(storage.put(KEY, _chunks(b"kept"), 100, once=True))
    with pytest.raises(TooLarge):
        asyncio.run(storage.put(KEY, _chunks(b"x" * 200), 100, once=True))
    assert _read(storage, KEY) == (b"kept", _sha(b"kept"), 4)


def test_sizes_lists_the_stored_bytes_under_a_prefix(storage: Storage) -> None:
    for key, body in (("layers/ns/a/r1/1/plan.bin", b"a" * 100), ("layers/ns/a/r1/1/run.log", b"b" * 10),
                      ("layers/ns/a/r10/1/run.log", b"c"), ("layers/other/a/r1/1/run.log", b"d")):
        asyncio.run(storage.put(key, _chunks(body), 1000))
    sizes = asyncio.run(storage.sizes("layers/ns/a/r1"))
    assert sorted(sizes) == ["layers/ns/a/r1/1/plan.bin", "layers/ns/a/r1/1/run.log"]
    # What the backend holds: the body plus the object's header (filesystem) or encryption's overhead.
    assert sizes["layers/ns/a/r1/1/plan.bin"] >= 100 and sizes["layers/ns/a/r1/1/run.log"] >= 10
    assert sorted(asyncio.run(storage.sizes("layers/ns"))) == [
        "layers/ns/a/r1/1/plan.bin", "layers/ns/a/r1/1/run.log", "layers/ns/a/r10/1/run.log"]
    assert asyncio.run(storage.sizes("layers/none")) == {}


def _legacy_writers(tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Callable[[bytes], Storage]]:
    def filesystem(body: bytes) -> Storage:
        path = tmp_path / "legacy" / KEY
        path.parent.mkdir(parents=True)
        path.write_bytes(body)  # as the datastore stored it before objects had a header
        return FilesystemStorage(tmp_path / "legacy")

    def s3(body: bytes) -> Storage:
        bucket: S3Bucket = request.getfixturevalue("s3_bucket")
        bucket.client.put_object(Bucket=bucket.name, Key=f"burrito/{KEY}", Body=body)  # no sum in its metadata
        return bucket.storage()

    return {"filesystem": filesystem, "s3": s3}


@pytest.mark.parametrize("backend", ["filesystem", "s3"])
def test_an_object_stored_before_sums_gets_its_sum_computed(backend: str, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    body = b"an older plan"
    storage = _legacy_writers(tmp_path, request)[backend](body)
    info = asyncio.run(storage.stat(KEY))
    assert info is not None and (info.sha256, info.size, info.recorded) == (_sha(body), len(body), False)
    assert _read(storage, KEY) == (body, _sha(body), len(body))
