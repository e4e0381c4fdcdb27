"""Streaming, limits and crashes on both backends, with the datastore in its own process
(`burrito-py datastore start`): bounded memory, no partial object ever visible, completed uploads survive."""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from burrito_py.datastore.s3 import MIN_PART_SIZE
from tests.integration.datastore.conftest import CREDENTIALS, S3Bucket
from tests.support.datastore_process import DatastoreProcess, RssSampler, datastore_process, rss_bytes
from tests.support.emulator import wait_for

MiB = 1024 * 1024
PLAN = "/api/v1/layers/default/app/runs/{run}/attempts/1/plan?format=bin"


@dataclass
class Backend:
    name: str
    env: dict[str, str]
    leftovers: Callable[[], list[str]]  # anything stored, visible or not (temp files, multipart uploads)
    uploading: Callable[[], bool]  # an upload is under way in the storage


@pytest.fixture(params=["filesystem", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    data = tmp_path / "data"
    if request.param == "filesystem":
        def files() -> list[str]:
            return sorted(str(p.relative_to(data)) for p in data.rglob("*") if p.is_file())

        return Backend("filesystem", {}, files, lambda: any(p.endswith(".tmp") for p in files()))
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    env = {
        **CREDENTIALS,
        "BURRITO_PY_DATASTORE_BACKEND": "s3",
        "BURRITO_PY_DATASTORE_S3_BUCKET": bucket.name,
        "BURRITO_PY_DATASTORE_S3_ENDPOINT_URL": bucket.endpoint,
        "BURRITO_PY_DATASTORE_S3_PATH_STYLE": "true",
        "BURRITO_PY_DATASTORE_S3_PART_SIZE": str(MIN_PART_SIZE),
    }
    return Backend("s3", env, lambda: bucket.keys() + bucket.uploads_in_progress(),
                   lambda: bool(bucket.uploads_in_progress()))


@pytest.fixture
def datastore(backend: Backend, tmp_path: Path) -> Iterator[DatastoreProcess]:
    with datastore_process(tmp_path / "data", backend.env) as process:
        yield process


def _block(seed: int) -> bytes:
    return hashlib.sha256(str(seed).encode()).digest() * (MiB // 32)


def _body(mib: int, digest: hashlib._Hash | None = None) -> Iterator[bytes]:
    for i in range(mib):
        block = _block(i)
        if digest is not None:
            digest.update(block)
        yield block


def _download_digest(url: str) -> str:
    digest = hashlib.sha256()
    with httpx.stream("GET", url, timeout=120) as response:
        assert response.status_code == 200, response.read()
        for chunk in response.iter_bytes():
            digest.update(chunk)
    return digest.hexdigest()


def _start_raw_upload(url: str, run: str, declared: int, sent_mib: int) -> socket.socket:
    """A client that announces `declared` bytes and sends only `sent_mib` MiB (then goes away)."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    head = f"PUT {PLAN.format(run=run)} HTTP/1.1\r\nHost: ds\r\nContent-Length: {declared}\r\n\r\n"
    sock.sendall(head.encode())
    for block in _body(sent_mib):
        sock.sendall(block)
    return sock


def test_interrupted_upload_leaves_nothing(backend: Backend, datastore: DatastoreProcess):
    sock = _start_raw_upload(datastore.url, "cut", 20 * MiB, 12)
    try:
        wait_for(backend.uploading, 30, 0.02, "the upload to reach the storage")
        # Mid-upload, nothing is readable under the key.
        assert httpx.get(datastore.url + PLAN.format(run="cut")).status_code == 404
    finally:
        sock.close()
    wait_for(lambda: backend.leftovers() == [], 30, 0.05, "the interrupted upload to be cleaned up")
    assert httpx.get(datastore.url + PLAN.format(run="cut")).status_code == 404


def test_over_the_limit_is_413_and_leaves_nothing(backend: Backend, tmp_path: Path):
    env = {**backend.env, "BURRITO_PY_DATASTORE_MAX_PLAN_BYTES": str(11 * MiB)}
    with datastore_process(tmp_path / "data", env) as process:
        response = httpx.put(process.url + PLAN.format(run="big"), content=_body(12), timeout=60)
        assert response.status_code == 413, response.text
        assert response.json()["error"] == ("plan.bin refused: plan.bin may hold at most 11 MiB "
                                            "(BURRITO_PY_DATASTORE_MAX_PLAN_BYTES)")
        wait_for(lambda: backend.leftovers() == [], 30, 0.05, "the refused upload to be cleaned up")
        ok = httpx.put(process.url + PLAN.format(run="fits"), content=_body(11), timeout=60)
        assert ok.status_code == 201, ok.text


def test_a_crash_mid_upload_keeps_every_completed_upload(backend: Backend, tmp_path: Path):
    data = tmp_path / "data"
    expected: dict[str, str] = {}
    with datastore_process(data, backend.env) as first:
        for run, mib in [("a", 1), ("b", 11), ("c", 0), ("d", 6)]:
            digest = hashlib.sha256()
            response = httpx.put(first.url + PLAN.format(run=run), content=_body(mib, digest), timeout=60)
            assert response.status_code == 201, response.text
            expected[run] = digest.hexdigest()
        sock = _start_raw_upload(first.url, "cut", 30 * MiB, 12)
        try:
            wait_for(backend.uploading, 30, 0.02, "the upload to reach the storage")
            first.kill()
        finally:
            sock.close()
    with datastore_process(data, backend.env) as second:
        for run, digest in expected.items():
            assert _download_digest(second.url + PLAN.format(run=run)) == digest, run
        assert httpx.get(second.url + PLAN.format(run="cut")).status_code == 404
        latest = "/api/v1/layers/default/app/runs/cut/plan?format=bin"
        assert httpx.get(second.url + latest).status_code == 404  # not listed either


@pytest.mark.slow
def test_a_200_mib_plan_streams_through_in_bounded_memory(backend: Backend, tmp_path: Path):
    env = {**backend.env, "BURRITO_PY_DATASTORE_MAX_PLAN_BYTES": str(256 * MiB)}
    with datastore_process(tmp_path / "data", env) as datastore:
        _transfer_200_mib(datastore)


def _transfer_200_mib(datastore: DatastoreProcess) -> None:
    warm = httpx.put(datastore.url + PLAN.format(run="warm"), content=_body(2), timeout=60)
    assert warm.status_code == 201
    _download_digest(datastore.url + PLAN.format(run="warm"))
    baseline = rss_bytes(datastore.pid)
    digest = hashlib.sha256()
    with RssSampler(datastore.pid) as rss:
        response = httpx.put(datastore.url + PLAN.format(run="huge"), content=_body(200, digest), timeout=300)
        assert response.status_code == 201, response.text
        assert response.json()["size"] == 200 * MiB
        assert _download_digest(datastore.url + PLAN.format(run="huge")) == digest.hexdigest()
    growth = rss.peak - baseline
    print(f"datastore RSS: baseline {baseline / MiB:.1f} MiB, peak {rss.peak / MiB:.1f} MiB, "
          f"growth {growth / MiB:.1f} MiB over a 200 MiB upload and download")
    assert growth < 50 * MiB
