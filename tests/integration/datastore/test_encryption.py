"""Encryption at rest: round trips over HTTP on both backends, tamper detection, key rotation, keys from a
Kubernetes Secret served by the emulator."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from burrito_local.apiserver import ApiServer

from burrito_py.datastore.backends import StorageSettings, build_storage, load_keyring
from burrito_py.datastore.client import DatastoreClient, DatastoreError
from burrito_py.datastore.encryption import EncryptedStorage, EncryptionError, Keyring
from burrito_py.datastore.in_process import running_datastore
from burrito_py.datastore.storage import FilesystemStorage, Storage
from tests.integration.datastore.conftest import S3Bucket

KEY_A, KEY_B = os.urandom(32), os.urandom(32)
PLAN = b"resource secret_password = hunter2\n" * 20_000  # ~700 KiB: several chunks
PLAN_KEY = "layers/default/app/app-plan-x/1/plan.json"


async def _chunks(data: bytes, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def _put(storage: Storage, key: str, data: bytes) -> None:
    asyncio.run(storage.put(key, _chunks(data), 10 * len(data) + 10))


def _read(storage: Storage, key: str) -> bytes:
    async def read() -> bytes:
        stream = await storage.open(key)
        assert stream is not None
        return b"".join([chunk async for chunk in stream])

    return asyncio.run(read())


@pytest.mark.parametrize("backend", ["filesystem", "s3"])
def test_round_trip_over_http_and_nothing_plain_at_rest(backend: str, s3_bucket: S3Bucket, tmp_path: Path):
    inner: Storage = FilesystemStorage(tmp_path / "data") if backend == "filesystem" else s3_bucket.storage()
    storage = EncryptedStorage(inner, Keyring({"a": KEY_A}, "a"))
    with running_datastore(tmp_path / "data", storage=storage) as url, DatastoreClient(url) as client:
        client.put_plan("default", "app", "app-plan-x", 1, "json", PLAN)
        client.put_plan("default", "app", "app-plan-x", 1, "short", b"")  # empty objects work too
        client.put_source("default", "repo", "rev1", "tree1", b"archive")
        assert client.get_plan("default", "app", "app-plan-x", None, "json") == PLAN
        assert client.get_plan("default", "app", "app-plan-x", 1, "short") == b""
        dest = tmp_path / "src.tar.gz"
        client.download_source("default", "repo", "rev1", dest)
        assert dest.read_bytes() == b"archive"
    raw = _read(inner, PLAN_KEY)
    assert b"hunter2" not in raw and raw.startswith(b"BPYE")
    assert len(raw) < len(PLAN) + 1024  # a header and one tag per 256 KiB chunk


def test_tampering_truncation_reordering_and_moving_are_detected(tmp_path: Path):
    inner = FilesystemStorage(tmp_path)
    storage = EncryptedStorage(inner, Keyring({"a": KEY_A}, "a"), chunk_size=1024)
    data = os.urandom(10 * 1024 + 17)
    _put(storage, PLAN_KEY, data)
    assert _read(storage, PLAN_KEY) == data
    raw = _read(inner, PLAN_KEY)
    header = len(raw) - (10 * (1024 + 16) + 17 + 16)
    unit = 1024 + 16

    def stored(body: bytes, key: str = PLAN_KEY) -> None:
        _put(inner, key, body)

    flipped = bytearray(raw)
    flipped[header + 3 * unit + 5] ^= 1
    cases = {
        "bit flip": bytes(flipped),
        "truncated at a chunk boundary": raw[: header + 4 * unit],
        "truncated mid-chunk": raw[:-100],
        "chunks swapped": raw[:header] + raw[header + unit : header + 2 * unit] + raw[header : header + unit]
        + raw[header + 2 * unit :],
        "chunk appended": raw + raw[header : header + unit],
        "chunk dropped": raw[:header] + raw[header + unit :],
    }
    for what, body in cases.items():
        stored(body)
        with pytest.raises(EncryptionError, match="truncated"):
            _read(storage, PLAN_KEY)
        assert what
    # The same ciphertext under another key (e.g. another layer's plan) does not authenticate either.
    stored(raw, "layers/default/other/run/1/plan.json")
    with pytest.raises(EncryptionError, match="failed authentication"):
        _read(storage, "layers/default/other/run/1/plan.json")
    stored(b"plain text, never encrypted")
    with pytest.raises(EncryptionError, match="not in the encrypted format"):
        asyncio.run(storage.open(PLAN_KEY))


@pytest.mark.parametrize("cached", [True, False], ids=["read-cache", "streamed"])
def test_tampered_object_is_never_served_as_a_complete_response(tmp_path: Path, cached: bool):
    """Streamed (above the read cache's object size), the tampering is found after the response started: the
    connection breaks. Read whole into the read cache (§10.8), it is found first: a 500 naming the object."""
    inner = FilesystemStorage(tmp_path / "data")
    storage = EncryptedStorage(inner, Keyring({"a": KEY_A}, "a"))
    limit = {} if cached else {"read_cache_max_object_bytes": len(PLAN) - 1}
    with running_datastore(tmp_path / "data", storage=storage, **limit) as url:
        with DatastoreClient(url) as client:
            client.put_plan("default", "app", "app-plan-x", 1, "json", PLAN)
        raw = bytearray(_read(inner, PLAN_KEY))
        raw[-20] ^= 0xFF  # in the last chunk: a streamed response has already started when it is detected
        _put(inner, PLAN_KEY, bytes(raw))
        url = f"{url}/api/v1/layers/default/app/runs/app-plan-x/attempts/1/plan?format=json"
        if cached:
            response = httpx.get(url)
            assert response.status_code == 500
            assert "failed authentication" in response.json()["error"] and b"hunter2" not in response.content
        else:
            with pytest.raises(httpx.HTTPError):
                httpx.get(url).read()


def test_rotation_keeps_old_objects_readable(tmp_path: Path):
    inner = FilesystemStorage(tmp_path)
    _put(EncryptedStorage(inner, Keyring({"a": KEY_A}, "a")), "old", b"written with a")
    rotated = EncryptedStorage(inner, Keyring({"a": KEY_A, "b": KEY_B}, "b"))
    _put(rotated, "new", b"written with b")
    assert _read(rotated, "old") == b"written with a"
    assert _read(rotated, "new") == b"written with b"
    header = _read(inner, "new")
    assert header[6 : 6 + header[5]] == b"b"  # the header names the key it was written with
    retired = EncryptedStorage(inner, Keyring({"b": KEY_B}, "b"))
    assert _read(retired, "new") == b"written with b"
    with pytest.raises(EncryptionError, match="key id 'a', which is not configured"):
        asyncio.run(retired.open("old"))


def test_size_limit_applies_to_the_plaintext(tmp_path: Path):
    storage = EncryptedStorage(FilesystemStorage(tmp_path), Keyring({"a": KEY_A}, "a"), chunk_size=16)
    stored = asyncio.run(storage.put("k", _chunks(b"x" * 100), 100))
    assert (stored.size, stored.sha256) == (100, hashlib.sha256(b"x" * 100).hexdigest())  # the plaintext's
    from burrito_py.datastore.storage import TooLarge

    with pytest.raises(TooLarge, match="limit of 99 bytes"):
        asyncio.run(storage.put("k2", _chunks(b"x" * 100, 7), 99))
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["k"]


def _secret(server: ApiServer, name: str, data: dict[str, bytes]) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }
    response = httpx.post(
        f"{server.url}/api/v1/namespaces/default/secrets",
        json=body,
        headers={"Authorization": "Bearer burrito-py-local-admin"},
    )
    assert response.status_code == 201, response.text


def test_keys_come_from_a_kubernetes_secret(apiserver: ApiServer, tmp_path: Path):
    _secret(apiserver, "ds-keys", {"2024-01": KEY_A, "2025-06": KEY_B})
    settings = StorageSettings(
        data_dir=tmp_path,
        encryption_enabled=True,
        encryption_secret_name="ds-keys",
        encryption_secret_namespace="default",
        encryption_active_key_id="2025-06",
    )
    keyring = asyncio.run(load_keyring(settings))
    assert keyring.active == "2025-06" and set(keyring.keys) == {"2024-01", "2025-06"}
    storage = build_storage(settings, keyring)
    assert isinstance(storage, EncryptedStorage)
    _put(storage, "k", b"hello")
    assert _read(storage, "k") == b"hello" and b"hello" not in (tmp_path / "k").read_bytes()


def test_bad_keys_are_named_without_their_value(apiserver: ApiServer, tmp_path: Path):
    short = b"sixteen byte key"
    _secret(apiserver, "short-keys", {"k1": short})
    base = {"data_dir": tmp_path, "encryption_enabled": True, "encryption_secret_namespace": "default"}
    settings = StorageSettings(**base, encryption_secret_name="short-keys", encryption_active_key_id="k1")
    expected = "Secret default/short-keys: encryption key 'k1': expected 32 bytes"
    with pytest.raises(EncryptionError, match=expected) as bad:
        asyncio.run(load_keyring(settings))
    assert short.decode() not in str(bad.value) and base64.b64encode(short).decode() not in str(bad.value)
    _secret(apiserver, "good-keys", {"k1": KEY_A})
    settings = StorageSettings(**base, encryption_secret_name="good-keys", encryption_active_key_id="k2")
    with pytest.raises(EncryptionError, match="active encryption key id 'k2' is not among the keys"):
        asyncio.run(load_keyring(settings))
    settings = StorageSettings(**base, encryption_secret_name="absent", encryption_active_key_id="k1")
    with pytest.raises(Exception, match="Secret default/absent: cannot read it"):
        asyncio.run(load_keyring(settings))


def test_http_download_of_a_plan_encrypted_with_a_missing_key_is_an_error(tmp_path: Path):
    inner = FilesystemStorage(tmp_path / "data")
    _put(EncryptedStorage(inner, Keyring({"gone": KEY_A}, "gone")), PLAN_KEY, b"{}")
    storage = EncryptedStorage(inner, Keyring({"b": KEY_B}, "b"))
    with (
        running_datastore(tmp_path / "data", storage=storage) as url,
        DatastoreClient(url) as client,
        pytest.raises(DatastoreError),
    ):
        client.get_plan("default", "app", "app-plan-x", 1, "json")


def test_an_unknown_key_id_is_a_clear_error_without_a_traceback(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """Issue 11, item 18: the caller gets the reason, the log one line (no traceback)."""
    inner = FilesystemStorage(tmp_path / "data")
    _put(EncryptedStorage(inner, Keyring({"gone": KEY_A}, "gone")), PLAN_KEY, b"{}")
    storage = EncryptedStorage(inner, Keyring({"b": KEY_B}, "b"))
    with running_datastore(tmp_path / "data", storage=storage) as url:
        response = httpx.get(f"{url}/api/v1/layers/default/app/runs/app-plan-x/attempts/1/plan?format=json")
    assert response.status_code == 500
    assert response.json() == {"error": f"object {PLAN_KEY} was encrypted with key id 'gone', which is not configured"}
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert any("key id 'gone'" in r.getMessage() for r in caplog.records)


def test_a_damaged_first_chunk_is_refused_before_a_200(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """Issue 11, item 18: the first chunk is authenticated before the response starts."""
    inner = FilesystemStorage(tmp_path / "data")
    storage = EncryptedStorage(inner, Keyring({"a": KEY_A}, "a"))
    with running_datastore(tmp_path / "data", storage=storage) as url:
        with DatastoreClient(url) as client:
            client.put_plan("default", "app", "app-plan-x", 1, "json", PLAN)
        raw = bytearray(_read(inner, PLAN_KEY))
        raw[40] ^= 0xFF  # just past the header: inside chunk 0
        _put(inner, PLAN_KEY, bytes(raw))
        response = httpx.get(f"{url}/api/v1/layers/default/app/runs/app-plan-x/attempts/1/plan?format=json")
    assert response.status_code == 500
    assert "failed authentication at chunk 0" in response.json()["error"]
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
