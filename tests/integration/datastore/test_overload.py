"""Overload and slow clients (docs/architecture.md §10.7), mounted against the datastore in its own process
(`burrito-py datastore start`): a request beyond the queue gets 503 with Retry-After instead of waiting, a
slowloris, a stalled upload and a client that never reads its response each lose their connection, and none of
them keeps a request slot."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from burrito_py.datastore.client import DatastoreClient
from tests.support.datastore_process import DatastoreProcess, datastore_process
from tests.support.slow_client import closed_within

MiB = 1024 * 1024
PLAN = "/api/v1/layers/default/app/runs/{run}/attempts/1/plan?format=bin"
# Well above the timers below (1 s), so a connection the datastore keeps open is told apart from one it closed
# even on a loaded machine.
PATIENCE = 15.0


def _settings(**values: float) -> dict[str, str]:
    return {f"BURRITO_PY_DATASTORE_{name.upper()}": str(value) for name, value in values.items()}


@pytest.fixture
def one_slot(tmp_path: Path) -> Iterator[DatastoreProcess]:
    """One request served at a time, none queued, and slow-client timers far away (they are not tested here)."""
    env = _settings(max_active_requests=1, max_queued_requests=0, read_timeout_seconds=120)
    with datastore_process(tmp_path / "data", env) as process:
        yield process


def _connect(url: str, receive_buffer: int | None = None) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.socket()
    if receive_buffer is not None:  # before connecting: the window is agreed in the handshake
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
    return sock


def _stalled_upload(url: str, run: str, sent: int = 100, declared: int = 100_000) -> socket.socket:
    """A PUT whose headers are complete (so it reaches the app and holds a request slot) and whose body stops
    after `sent` of its `declared` bytes."""
    sock = _connect(url)
    sock.sendall(f"PUT {PLAN.format(run=run)} HTTP/1.1\r\nHost: datastore\r\nContent-Length: {declared}\r\n"
                 "Content-Type: application/octet-stream\r\n\r\n".encode() + b"x" * sent)
    return sock


def test_a_request_beyond_the_queue_gets_503_with_retry_after(one_slot: DatastoreProcess) -> None:
    holder = _stalled_upload(one_slot.url, "holder")
    try:
        time.sleep(0.5)  # the upload is in the app, waiting for its body
        started = time.monotonic()
        shed = httpx.get(one_slot.url + PLAN.format(run="other"), timeout=PATIENCE)
        assert shed.status_code == 503, shed.text
        assert shed.headers["retry-after"] == "1"
        assert "overloaded" in shed.json()["error"]
        assert time.monotonic() - started < 5, "a shed request is answered at once, not after a wait"
        # Liveness is never shed: a busy datastore must not be restarted for it.
        assert httpx.get(one_slot.url + "/healthz", timeout=PATIENCE).status_code == 200
    finally:
        holder.close()
    # The holder's slot is free again once it went away.
    answer = httpx.get(one_slot.url + PLAN.format(run="other"), timeout=PATIENCE)
    assert answer.status_code == 404, answer.text


def test_a_queued_request_is_served_when_a_slot_frees_or_refused_after_its_wait(tmp_path: Path) -> None:
    env = _settings(max_active_requests=1, max_queued_requests=1, queue_timeout_seconds=1.5,
                    read_timeout_seconds=120)
    with datastore_process(tmp_path / "data", env) as ds:
        holder = _stalled_upload(ds.url, "holder")
        time.sleep(0.5)
        # Nobody frees the slot: the queued request is refused after its wait, not left hanging.
        started = time.monotonic()
        waited = httpx.get(ds.url + PLAN.format(run="other"), timeout=PATIENCE)
        assert waited.status_code == 503 and waited.headers["retry-after"] == "1", waited.text
        assert 1.0 <= time.monotonic() - started < 6
        # The slot frees while a request waits: that request is served.
        answers: list[int] = []
        queued = threading.Thread(target=lambda: answers.append(
            httpx.get(ds.url + PLAN.format(run="other"), timeout=PATIENCE).status_code))
        queued.start()
        time.sleep(0.5)
        holder.close()
        queued.join(PATIENCE)
        assert answers == [404]


def test_a_slowloris_sending_headers_byte_by_byte_is_cut_off(tmp_path: Path) -> None:
    with datastore_process(tmp_path / "data", _settings(header_timeout_seconds=1)) as ds:
        sock = _connect(ds.url)
        try:
            headers = b"GET /api/v1/healthz HTTP/1.1\r\nHost: datastore\r\n" + b"X-Slow: " + b"a" * 200
            closed = closed_within(sock, PATIENCE, trickle=headers)
        finally:
            sock.close()
        assert closed is not None, f"a client sending headers a byte every 0.2 s kept its connection {PATIENCE} s"
        assert closed < 6
        # A client that connects and sends nothing is cut off too.
        idle = _connect(ds.url)
        try:
            assert closed_within(idle, PATIENCE) is not None
        finally:
            idle.close()
        assert httpx.get(ds.url + "/healthz", timeout=PATIENCE).status_code == 200


def test_a_stalled_upload_is_cut_off_stores_nothing_and_frees_its_slot(tmp_path: Path) -> None:
    env = _settings(read_timeout_seconds=1, max_active_requests=1, max_queued_requests=0)
    with datastore_process(tmp_path / "data", env) as ds:
        sock = _stalled_upload(ds.url, "stalled")
        try:
            closed = closed_within(sock, PATIENCE)
        finally:
            sock.close()
        assert closed is not None, f"an upload that stopped sending kept its connection {PATIENCE} s"
        assert closed < 6
        # Nothing stored, and the one slot is free (a held slot would answer 503).
        assert httpx.get(ds.url + PLAN.format(run="stalled"), timeout=PATIENCE).status_code == 404
        leftovers = [p for p in (tmp_path / "data").rglob("*") if p.is_file()]
        assert leftovers == []


def test_a_client_that_never_reads_its_response_is_cut_off(tmp_path: Path) -> None:
    size = 24 * MiB  # far more than the socket buffers hold, so the datastore must wait for the reader
    env = _settings(write_timeout_seconds=1, max_active_requests=1, max_queued_requests=0)
    with datastore_process(tmp_path / "data", env) as ds:
        stored = httpx.put(ds.url + PLAN.format(run="big"), content=b"p" * size, timeout=PATIENCE * 4)
        assert stored.status_code == 201, stored.text
        sock = _connect(ds.url, receive_buffer=64 * 1024)
        try:
            sock.sendall(f"GET {PLAN.format(run='big')} HTTP/1.1\r\nHost: datastore\r\n\r\n".encode())
            time.sleep(5)  # reads nothing meanwhile
            # The slot was given back: the next request is served, not shed.
            assert httpx.get(ds.url + "/api/v1/layers/default/app/runs/none/plan", timeout=PATIENCE).status_code \
                == 404
            received = 0
            sock.settimeout(PATIENCE)
            try:
                while chunk := sock.recv(MiB):
                    received += len(chunk)
            except (ConnectionResetError, TimeoutError):
                pass
        finally:
            sock.close()
        assert received < size, "the response was kept for a client that did not read it"


def test_the_datastore_client_comes_back_when_told(one_slot: DatastoreProcess) -> None:
    """The runner's and controllers' client waits as long as Retry-After says (its own backoff, 0.2 s then 0.4 s,
    would give up while the datastore is still busy)."""
    with DatastoreClient(one_slot.url) as client:
        client.put_plan("default", "app", "told", 1, "json", b"{}")
        holder = _stalled_upload(one_slot.url, "holder")
        threading.Timer(1.5, holder.close).start()  # busy for 1.5 s
        time.sleep(0.3)
        started = time.monotonic()
        assert client.get_plan("default", "app", "told", 1, "json") == b"{}"
        assert time.monotonic() - started >= 1.0
