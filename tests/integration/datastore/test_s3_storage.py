"""The S3 backend against moto's standalone server, through the datastore's HTTP API and directly."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from burrito_py.datastore.client import DatastoreClient, DatastoreError
from burrito_py.datastore.in_process import running_datastore
from burrito_py.datastore.s3 import MIN_PART_SIZE, STREAMED_UPLOADS, S3Storage
from burrito_py.datastore.storage import ObjectInfo, TooLarge
from tests.integration.datastore.conftest import S3Bucket


def test_plans_logs_and_sources_round_trip_over_http(s3_bucket: S3Bucket, tmp_path: Path):
    with running_datastore(tmp_path / "unused", storage=s3_bucket.storage()) as url, DatastoreClient(url) as client:
        client.put_plan("default", "app", "app-plan-x", 1, "json", b'{"attempt": 1}')
        client.put_plan("default", "app", "app-plan-x", 2, "json", b'{"attempt": 2}')
        client.put_plan("default", "app", "app-plan-x2", 3, "json", b'{"other run": 3}')
        client.put_logs("default", "app", "app-plan-x", 1, b"terraform init\n")
        assert client.get_plan("default", "app", "app-plan-x", 1, "json") == b'{"attempt": 1}'
        # `app-plan-x` must not see `app-plan-x2`'s attempt 3: listing is by directory, not by string prefix.
        assert client.get_plan("default", "app", "app-plan-x", None, "json") == b'{"attempt": 2}'
        assert client.get_logs("default", "app", "app-plan-x", 1) == b"terraform init\n"
        with pytest.raises(DatastoreError) as missing:
            client.get_plan("default", "app", "app-plan-y", None, "json")
        assert missing.value.status_code == 404

        client.put_source("default", "repo", "rev1", "tree1", b"archive bytes")
        client.put_source("default", "repo", "rev2", "tree1", None)
        assert client.has_tree("default", "repo", "tree1") and client.has_source("default", "repo", "rev2")
        dest = tmp_path / "src.tar.gz"
        client.download_source("default", "repo", "rev2", dest)
        assert dest.read_bytes() == b"archive bytes"
    assert sorted(s3_bucket.keys()) == [
        "burrito/layers/default/app/app-plan-x/1/plan.json",
        "burrito/layers/default/app/app-plan-x/1/run.log",
        "burrito/layers/default/app/app-plan-x/2/plan.json",
        "burrito/layers/default/app/app-plan-x2/3/plan.json",
        "burrito/sources/default/repo/revisions/rev1",
        "burrito/sources/default/repo/revisions/rev2",
        "burrito/sources/default/repo/tree1.tar.gz",
    ]


def _etag_after_upload(s3_bucket: S3Bucket, tmp_path: Path, storage: S3Storage) -> str:
    plan = tmp_path / "plan.bin"
    plan.write_bytes(os.urandom(2 * MIN_PART_SIZE + 12345))
    with running_datastore(tmp_path / "unused", storage=storage) as url, DatastoreClient(url) as client:
        client.put_plan("default", "big", "big-plan-a", 1, "bin", plan)
        dest = tmp_path / "out.bin"
        client.download_plan("default", "big", "big-plan-a", 1, "bin", dest)
    assert hashlib.sha256(dest.read_bytes()).digest() == hashlib.sha256(plan.read_bytes()).digest()
    head = s3_bucket.client.head_object(Bucket=s3_bucket.name, Key="burrito/layers/default/big/big-plan-a/1/plan.bin")
    assert head["Metadata"] == {"burrito-sha256": hashlib.sha256(plan.read_bytes()).hexdigest(),
                                "burrito-size": str(plan.stat().st_size)}
    assert s3_bucket.uploads_in_progress() == []
    assert s3_bucket.keys() == ["burrito/layers/default/big/big-plan-a/1/plan.bin"]  # no staging object left
    return str(head["ETag"]).strip('"')


def test_a_declared_plan_larger_than_a_part_streams_as_one_put_and_back(s3_bucket: S3Bucket, tmp_path: Path):
    # The client declares the file's sum (X-Burrito-Sha256): the body streams to its key as one PutObject, the sum
    # in its metadata (a body without a declared sum is staged and copied: test_object_sums).
    etag = _etag_after_upload(s3_bucket, tmp_path, s3_bucket.storage())
    assert "-" not in etag, etag  # S3 marks multipart objects with "-<parts>"


def test_a_declared_plan_beyond_the_streamed_uploads_goes_in_parts_straight_to_its_key(s3_bucket: S3Bucket,
                                                                                       tmp_path: Path):
    storage = s3_bucket.storage()
    storage.streaming = STREAMED_UPLOADS  # as many streamed uploads in progress as may be
    assert _etag_after_upload(s3_bucket, tmp_path, storage).endswith("-3")


def test_a_body_other_than_its_declared_sum_is_never_stored(s3_bucket: S3Bucket, tmp_path: Path):
    """The attack: a client declares the sum (and size) of one plan and streams other bytes. The datastore forwards
    the body to S3 as it arrives, but holds its last piece until the whole body's sum is checked: the PUT is broken
    off, and nothing is stored (a body short of its declared size: test_object_sums)."""
    declared, sent = os.urandom(2 * MIN_PART_SIZE + 12345), bytearray(os.urandom(2 * MIN_PART_SIZE + 12345))
    path = "/api/v1/layers/default/big/runs/big-plan-a/attempts/1/plan?format=bin"
    with running_datastore(tmp_path / "unused", storage=s3_bucket.storage()) as url:
        for body in (sent, declared[:-1] + bytes([declared[-1] ^ 1])):  # other bytes; the last byte changed
            headers = {"X-Burrito-Sha256": hashlib.sha256(declared).hexdigest()}
            answer = httpx.put(url + path, content=bytes(body), headers=headers, timeout=60)
            assert answer.status_code == 400, answer.text
            assert "nothing was stored" in answer.json()["error"]
    assert s3_bucket.keys() == []
    assert s3_bucket.uploads_in_progress() == []


def test_a_completed_upload_survives_a_restart(s3_bucket: S3Bucket, tmp_path: Path):
    with running_datastore(tmp_path / "unused", storage=s3_bucket.storage()) as url, DatastoreClient(url) as client:
        client.put_plan("default", "app", "run", 1, "json", b"{}")
    with running_datastore(tmp_path / "unused", storage=s3_bucket.storage()) as url, DatastoreClient(url) as client:
        assert client.get_plan("default", "app", "run", 1, "json") == b"{}"


async def _broken(parts: int, part: bytes) -> AsyncIterator[bytes]:
    for _ in range(parts):
        yield part
    raise ConnectionResetError("client went away")


async def _chunks(data: bytes, size: int = 1024 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.mark.parametrize("parts", [1, 3], ids=["single-put", "multipart"])
def test_failed_or_oversized_uploads_leave_no_object_and_no_upload(s3_bucket: S3Bucket, parts: int):
    storage = s3_bucket.storage()
    key = "layers/default/app/r/1/plan.bin"
    with pytest.raises(ConnectionResetError):
        asyncio.run(storage.put(key, _broken(parts, b"x" * MIN_PART_SIZE), 100 * MIN_PART_SIZE))
    with pytest.raises(TooLarge):
        asyncio.run(storage.put(key, _chunks(b"y" * (parts * MIN_PART_SIZE + 1)), parts * MIN_PART_SIZE))
    assert s3_bucket.keys() == []
    assert s3_bucket.uploads_in_progress() == []
    assert not asyncio.run(storage.exists(key))
    assert asyncio.run(storage.open(key)) is None


def test_a_failed_rewrite_keeps_the_previous_object(s3_bucket: S3Bucket):
    storage = s3_bucket.storage()
    key = "layers/default/app/r/1/plan.json"
    asyncio.run(storage.put(key, _chunks(b"first"), 100))
    with pytest.raises(ConnectionResetError):
        asyncio.run(storage.put(key, _broken(2, b"z" * MIN_PART_SIZE), 10 * MIN_PART_SIZE))

    async def read() -> bytes:
        stream = await storage.open(key)
        assert stream is not None
        return b"".join([chunk async for chunk in stream])

    assert asyncio.run(read()) == b"first"


def test_a_streamed_upload_broken_off_midway_stores_nothing_and_keeps_the_previous_object(s3_bucket: S3Bucket):
    """A declared body streams to S3 as it arrives: a client gone after some of it (several pieces already sent
    on) breaks the PUT off, so the key keeps what it held."""
    storage = s3_bucket.storage()
    key = "layers/default/app/r/1/plan.bin"
    asyncio.run(storage.put(key, _chunks(b"first"), 100))
    whole = b"z" * (3 * MIN_PART_SIZE)
    declared = ObjectInfo(hashlib.sha256(whole).hexdigest(), len(whole))
    with pytest.raises(ConnectionResetError):
        asyncio.run(storage.put(key, _broken(2, b"z" * MIN_PART_SIZE), 10 * MIN_PART_SIZE, expected=declared))
    assert storage.streaming == 0
    assert s3_bucket.keys() == ["burrito/" + key]
    assert s3_bucket.uploads_in_progress() == []
    opened = asyncio.run(storage.stat(key))
    assert opened is not None and opened.sha256 == hashlib.sha256(b"first").hexdigest()


def test_prefix_delete_list_and_stale_upload_sweep(s3_bucket: S3Bucket):
    storage = s3_bucket.storage(prefix="/team-a/")
    other = s3_bucket.storage(prefix="team-b")
    asyncio.run(storage.put("sources/ns/repo/t1.tar.gz", _chunks(b"a"), 10))
    asyncio.run(other.put("sources/ns/repo/t2.tar.gz", _chunks(b"b"), 10))
    assert asyncio.run(storage.list("")) == ["sources/ns/repo/t1.tar.gz"]
    assert asyncio.run(storage.list("sources/ns")) == ["sources/ns/repo/t1.tar.gz"]
    assert asyncio.run(storage.list("sources/n")) == []
    asyncio.run(storage.delete("sources/ns/repo/t1.tar.gz"))
    assert asyncio.run(storage.list("")) == [] and asyncio.run(other.list("")) == ["sources/ns/repo/t2.tar.gz"]

    # A process that died mid-upload leaves an invisible multipart upload; the sweep aborts old ones only.
    s3_bucket.client.create_multipart_upload(Bucket=s3_bucket.name, Key="team-a/layers/ns/l/r/1/plan.bin")
    # (moto dates every upload in 2010, so "young" here means younger than a century.)
    now = datetime.now(UTC)
    assert asyncio.run(storage.abort_stale_uploads(timedelta(days=36500), now)) == 0
    assert s3_bucket.uploads_in_progress() == ["team-a/layers/ns/l/r/1/plan.bin"]
    assert asyncio.run(storage.abort_stale_uploads(timedelta(hours=1), now)) == 1
    assert s3_bucket.uploads_in_progress() == []


def test_bad_keys_and_settings_are_refused_with_the_reason(s3_bucket: S3Bucket):
    with pytest.raises(ValueError, match="invalid storage key"):
        asyncio.run(s3_bucket.storage().exists("layers/../etc"))
    with pytest.raises(ValueError, match="below S3's minimum"):
        S3Storage(s3_bucket.client, s3_bucket.name, part_size=1024)
    with pytest.raises(ValueError, match="bucket"):
        S3Storage(s3_bucket.client, "")
