"""The HTTP client of the runner (httpclient.py) and its datastore calls (runner/store.py), on real HTTP(S) servers:
the token goes to the datastore's origin only, TLS trusts only the CAs it is given (or httpx's default trust),
files stream in blocks, kept-alive connections the server closed are not failed on, and the datastore calls
retry, map errors and write downloads as `datastore/client.py` does (issue 31)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import random
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from burrito_py.datastore.wire import SHA_HEADER, DatastoreError
from burrito_py.httpclient import BLOCK_SIZE, Http, TransportError
from burrito_py.runner.store import RunnerStore
from tests.support.fakes.mirrors import FakeCa, make_ca

TOKEN = "runner-token-secret"
Answer = tuple[int, dict[str, str], bytes]


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    peer: tuple[str, int]


@dataclass
class Script:
    """Each request gets the next scripted (status, headers, body), then 200 `{}`."""

    answers: list[Answer] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    drop_idle: bool = False  # close each connection after its answer without saying so (an idle timeout)
    url: str = ""
    closed: threading.Event = field(default_factory=threading.Event)  # the server closed a connection


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the datastore and the API server

        def log_message(self, *_: object) -> None:
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding") == "chunked":
                parts = []
                while size := int(self.rfile.readline().strip(), 16):
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
                self.rfile.readline()
                return b"".join(parts)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _answer(self) -> None:
            body = self._body()
            script.seen.append(Seen(self.command, self.path, dict(self.headers.items()), body,
                                    self.client_address))
            status, headers, payload = script.answers.pop(0) if script.answers else (200, {}, b"{}")
            with contextlib.suppress(ConnectionError):  # a client that no longer reads it (closed)
                self.send_response(status)
                for name, value in {"Content-Length": str(len(payload)), **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()
            if script.drop_idle:
                self.close_connection = True

        do_GET = do_PUT = do_POST = do_LOCK = do_UNLOCK = _answer

    return Handler


class _Server(ThreadingHTTPServer):
    script: Script

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        self.script.closed.set()


@contextlib.contextmanager
def serving(script: Script, tls: FakeCa | None = None) -> Iterator[Script]:
    server = _Server(("127.0.0.1", 0), _handler(script))
    server.script = script
    server.daemon_threads = True
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.cert, tls.key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    script.url = f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield script
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> FakeCa:
    return make_ca(tmp_path_factory.mktemp("ca"))


def _json(status: int, value: object, headers: dict[str, str] | None = None) -> Answer:
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(value).encode()


# -- where the token goes -----------------------------------------------------------------------
def test_a_redirect_is_not_followed_so_the_token_stays_with_the_datastore() -> None:
    """A datastore (or anything on its address) answering with a redirect to another origin never gets the runner
    to send its token there: the call fails naming the redirect (its empty body is not the object), and the other
    origin sees no request."""
    with serving(Script()) as elsewhere, serving(Script()) as datastore:
        datastore.answers.append((307, {"Location": f"{elsewhere.url}/api/v1/steal"}, b""))
        with RunnerStore(datastore.url, token=TOKEN) as store, pytest.raises(DatastoreError) as refused:
            store.get_inputs("default", "app", "run-1")
    assert str(refused.value) == ("inputs of default/app run run-1: the datastore answered with a redirect "
                                  "(HTTP 307), not followed")
    assert [(s.path, s.headers.get("Authorization")) for s in datastore.seen] == [
        ("/api/v1/layers/default/app/runs/run-1/inputs", f"Bearer {TOKEN}")]
    assert elsewhere.seen == []


def test_no_proxy_from_the_environment_sees_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP(S)_PROXY in a runner's environment (meant for terraform's downloads) does not route its datastore calls."""
    with serving(Script()) as proxy, serving(Script()) as datastore:
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
            monkeypatch.setenv(name, proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        with RunnerStore(datastore.url, token=TOKEN) as store:
            store.get_inputs("default", "app", "run-1")
    assert len(datastore.seen) == 1
    assert proxy.seen == []


# -- TLS ------------------------------------------------------------------------------------------
def test_https_is_verified_against_the_trusted_cas_only(ca: FakeCa, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with serving(Script(), tls=ca) as server:
        untrusting = Http(server.url, {"Authorization": f"Bearer {TOKEN}"})  # certifi's bundle: not the test CA
        with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED"):
            untrusting.request("GET", "/x")
        assert server.seen == []  # the handshake failed: no request, no token
        trusting = Http(server.url, context=ssl.create_default_context(cadata=ca.ca_pem))
        assert trusting.request("GET", "/x").status == 200
        (tmp_path / "ca.pem").write_text(ca.ca_pem)
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # httpx's default trust honours it
        with RunnerStore(server.url, token=TOKEN) as store:
            store.get_inputs("default", "app", "run-1")
        untrusting.close()
        trusting.close()
    assert len(server.seen) == 2


def test_a_certificate_for_another_name_is_refused(ca: FakeCa) -> None:
    with serving(Script(), tls=ca) as server:
        wrong_name = server.url.replace("127.0.0.1", "localhost.localdomain.invalid")
        context = ssl.create_default_context(cadata=ca.ca_pem)
        with pytest.raises(TransportError):
            Http(wrong_name, context=context, timeout=5).request("GET", "/x")


def test_a_name_is_checked_against_the_certificate_it_was_asked_by(tmp_path: Path) -> None:
    """`Http` gives the resolver and TLS an ASCII host as bytes (no `idna` codec on the runner's path): the
    certificate is still checked against that very name. A server whose certificate names another host is refused
    under a name it does not hold, though the CA is trusted and the address is the same."""
    from tests.support.fakes.tls import make_tls

    mine, other = make_tls(tmp_path / "mine", ("localhost",)), make_tls(tmp_path / "other", ("other.example",))
    for files, refused in ((mine, False), (other, True)):
        tls = FakeCa(files.ca.read_text(), files.cert, files.key)
        with serving(Script(), tls=tls) as server:
            http = Http(server.url.replace("127.0.0.1", "localhost"),
                        context=ssl.create_default_context(cadata=tls.ca_pem), timeout=5)
            try:
                if refused:
                    with pytest.raises(TransportError, match="Hostname mismatch"):
                        http.request("GET", "/x")
                    assert server.seen == []
                else:
                    assert http.request("GET", "/x").status == 200
            finally:
                http.close()


@pytest.mark.parametrize("host", ["a..b", "x" * 64 + ".example"])
def test_a_name_no_resolver_takes_is_no_answer_not_an_internal_error(host: str) -> None:
    """An empty or over-long label: the resolver refuses it (what the `idna` codec refused with a UnicodeError, which
    escaped the caller's handling of a failed call)."""
    with pytest.raises(TransportError, match="gaierror"):
        Http(f"http://{host}:80", timeout=5).request("GET", "/")


def test_an_ascii_name_reaches_the_resolver_and_tls_without_the_idna_codec() -> None:
    """~3 ms of every runner's start-up (issue 31): `encodings.idna` with `stringprep` and `unicodedata`."""
    script = (  # a bare socket for the server: http.server's own start-up asks the codec (socket.getfqdn)
        "import socket, sys, threading\n"
        "from burrito_py.httpclient import Http\n"
        "listener = socket.create_server(('127.0.0.1', 0))\n"
        "def answer():\n"
        "    peer, _ = listener.accept()\n"
        "    peer.recv(65536)\n"
        "    peer.sendall(b'HTTP/1.1 204 No Content\\r\\nContent-Length: 0\\r\\n\\r\\n')\n"
        "threading.Thread(target=answer, daemon=True).start()\n"
        "http = Http(f'http://localhost:{listener.getsockname()[1]}')\n"
        "assert http.request('GET', '/x').status == 204\n"
        "print(sorted(m for m in ('encodings.idna', 'stringprep', 'unicodedata') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False,
                          cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


# -- streaming and connections --------------------------------------------------------------------
class _Recording(io.BytesIO):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.reads: list[int | None] = []

    def read(self, size: int | None = -1, /) -> bytes:
        self.reads.append(size)
        return super().read(size)


def test_a_file_body_is_streamed_in_blocks() -> None:
    data = bytes(range(256)) * (3 * BLOCK_SIZE // 256 + 7)
    body = _Recording(data)
    with serving(Script()) as server:
        http = Http(server.url)
        assert http.request("PUT", "/x", body=body, headers={"Content-Length": str(len(data))}).status == 200
        http.close()
    assert server.seen[0].body == data
    assert "Transfer-Encoding" not in server.seen[0].headers
    assert all(size is not None and 0 < size <= BLOCK_SIZE for size in body.reads)  # never read whole


def test_a_plan_file_is_uploaded_with_its_declared_sum_and_length(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_bytes(b'{"format_version": "1.2"}' * 100_000)
    digest = hashlib.sha256(plan.read_bytes()).hexdigest()
    with serving(Script()) as server:
        server.answers.append((200, {SHA_HEADER: digest}, b"{}"))
        with RunnerStore(server.url, token=TOKEN) as store:
            assert store.put_plan("default", "app", "run-1", 2, "json", plan) == f"sha256:{digest}"
            store.put_plan("default", "app", "run-1", 2, "short", b"1 to add")
    first, second = server.seen
    assert (first.method, first.path) == ("PUT", "/api/v1/layers/default/app/runs/run-1/attempts/2/plan?format=json")
    assert (first.headers[SHA_HEADER], first.headers["Content-Length"]) == (digest, str(plan.stat().st_size))
    assert first.body == plan.read_bytes()
    assert second.headers[SHA_HEADER] == hashlib.sha256(b"1 to add").hexdigest()
    assert first.peer == second.peer  # one kept-alive connection


def test_a_connection_the_server_closed_while_idle_is_not_failed_on() -> None:
    with serving(Script(drop_idle=True)) as server:
        http = Http(server.url)
        assert http.request("GET", "/a").status == 200
        assert server.closed.wait(10)  # the server closed it, idle on the client's side
        assert http.request("GET", "/b").status == 200  # no retry here: a stale connection would raise
        http.close()
    assert [s.path for s in server.seen] == ["/a", "/b"]
    assert server.seen[0].peer != server.seen[1].peer


# -- the datastore calls --------------------------------------------------------------------------
def test_a_5xx_is_retried_as_the_datastore_asks_and_a_4xx_is_not(tmp_path: Path) -> None:
    with serving(Script()) as server:
        server.answers += [_json(503, {"error": "busy"}, {"Retry-After": "0"}), _json(200, {"a": 1})]
        with RunnerStore(server.url, token=TOKEN) as store:
            assert store.get_inputs("default", "app", "run-1") == b'{"a": 1}'
            server.answers.append(_json(413, {"error": "too large", "limit": 10}))
            with pytest.raises(DatastoreError) as refused:
                store.put_plan("default", "app", "run-1", 1, "short", b"x" * 20)
    assert str(refused.value) == "upload of the short plan of default/app run run-1 attempt 1: too large"
    assert (refused.value.status_code, refused.value.limit) == (413, 10)
    assert len(server.seen) == 3


def test_a_datastore_that_keeps_failing_is_unavailable(tmp_path: Path) -> None:
    with serving(Script()) as server:
        server.answers += [_json(500, {"error": "boom"})] * 3
        with RunnerStore(server.url) as store, pytest.raises(DatastoreError) as failed:
            store.download_source("default", "infra", "abc", tmp_path / "source.tar.gz")
    assert str(failed.value) == "source of default/infra at abc: datastore unavailable (HTTP 500)"
    assert failed.value.status_code is None
    assert len(server.seen) == 3
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_an_unreachable_datastore_is_unavailable(tmp_path: Path) -> None:
    with serving(Script()) as server:
        url = server.url
    with RunnerStore(url) as store, pytest.raises(DatastoreError, match=r"^inputs of default/app run r: datastore "
                                                                          r"unavailable \(ConnectionRefusedError"):
        store.get_inputs("default", "app", "r")


def test_downloads_land_whole_and_a_404_says_why(tmp_path: Path) -> None:
    # Varied bytes over several blocks and a short last one: the download reads into one reused block.
    archive = b"\x1f\x8b" + random.Random(0).randbytes(3 * BLOCK_SIZE + 7)
    dest = tmp_path / "work" / "plan.bin"
    with serving(Script()) as server:
        server.answers += [(200, {}, archive), _json(404, {"error": "no such plan"})]
        with RunnerStore(server.url, token=TOKEN) as store:
            store.download_plan("default", "app", "run-1", 3, "bin", dest)
            with pytest.raises(DatastoreError) as missing:
                store.download_plan("default", "app", "run-2", None, "bin", tmp_path / "other.bin")
    assert dest.read_bytes() == archive
    assert server.seen[0].path == "/api/v1/layers/default/app/runs/run-1/attempts/3/plan?format=bin"
    assert server.seen[1].path == "/api/v1/layers/default/app/runs/run-2/plan?format=bin"
    assert (str(missing.value), missing.value.status_code) == (
        "plan of default/app run run-2 (format bin): no such plan", 404)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["plan.bin", "work"]


def test_the_applied_record_round_trip_and_its_absence() -> None:
    with serving(Script()) as server:
        server.answers += [(200, {}, b"{}"), _json(200, {"sum": "sha256:ab", "attempt": 1}), _json(404, {})]
        with RunnerStore(server.url, token=TOKEN) as store:
            store.put_applied("default", "app", "run-1", 1, "sha256:ab")
            assert store.get_applied("default", "app", "run-1") == "sha256:ab"
            assert store.get_applied("default", "app", "run-1") is None
    assert json.loads(server.seen[0].body) == {"sum": "sha256:ab", "attempt": 1}


def test_a_state_copy_releases_the_lock_when_refused() -> None:
    lock = {"ID": "id-1", "Operation": "migrate-state"}
    with serving(Script()) as server:
        server.answers += [(200, {}, b""), _json(409, {"error": "another lineage"})]
        with RunnerStore(server.url, token=TOKEN) as store, pytest.raises(DatastoreError) as refused:
            store.copy_state_in("default", "app", b'{"lineage": "x"}', lock)
    assert str(refused.value) == "copy of the state into the datastore for default/app: another lineage"
    assert [(s.method, s.path) for s in server.seen] == [
        ("LOCK", "/api/v1/layers/default/app/state/lock"), ("POST", "/api/v1/layers/default/app/state?ID=id-1"),
        ("UNLOCK", "/api/v1/layers/default/app/state/lock")]
    assert all(s.headers.get("Authorization") == f"Bearer {TOKEN}" for s in server.seen)


# -- the datastore client's downloads (datastore/client.py), on the same client ----------------------------------
def test_the_datastore_clients_downloads_land_whole_with_the_token_the_file_holds_now(tmp_path: Path) -> None:
    """`DatastoreClient` downloads through httpclient.py (1 MiB reads: 0.65x -> 0.93x of boto3's get_object,
    issue 31), with the token its file holds at that moment (a projected token is rewritten as it rotates), a 5xx
    retried, a 404 named, and nothing half-written."""
    from burrito_py.datastore.client import DatastoreClient

    archive = random.Random(1).randbytes(2 * BLOCK_SIZE + 3)
    token_file = tmp_path / "token"
    token_file.write_text("first-token\n")
    with serving(Script()) as server:
        server.answers += [(200, {}, archive), _json(503, {"error": "busy"}, {"Retry-After": "0"}), (200, {}, b"2"),
                           _json(404, {"error": "no such plan"})]
        with DatastoreClient(server.url, token_file=token_file) as client:
            client.download_plan("default", "app", "run-1", 3, "bin", tmp_path / "plan.bin")
            token_file.write_text("second-token-longer\n")
            client.download_source("default", "infra", "abc123", tmp_path / "source.tar.gz")
            with pytest.raises(DatastoreError) as missing:
                client.download_plan("default", "app", "run-2", None, "json", tmp_path / "other.json")
    assert (tmp_path / "plan.bin").read_bytes() == archive
    assert (tmp_path / "source.tar.gz").read_bytes() == b"2"
    assert [(s.path, s.headers.get("Authorization")) for s in server.seen] == [
        ("/api/v1/layers/default/app/runs/run-1/attempts/3/plan?format=bin", "Bearer first-token"),
        ("/api/v1/repositories/default/infra/revisions/abc123/source", "Bearer second-token-longer"),
        ("/api/v1/repositories/default/infra/revisions/abc123/source", "Bearer second-token-longer"),
        ("/api/v1/layers/default/app/runs/run-2/plan?format=json", "Bearer second-token-longer")]
    assert (str(missing.value), missing.value.status_code) == (
        "plan of default/app run run-2 (format json): no such plan", 404)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.bin", "source.tar.gz", "token"]


def test_the_datastore_clients_download_follows_no_redirect(tmp_path: Path) -> None:
    from burrito_py.datastore.client import DatastoreClient

    with serving(Script()) as elsewhere, serving(Script()) as datastore:
        datastore.answers.append((307, {"Location": f"{elsewhere.url}/api/v1/steal"}, b""))
        with DatastoreClient(datastore.url, token=TOKEN) as client, pytest.raises(DatastoreError):
            client.download_plan("default", "app", "run-1", 1, "bin", tmp_path / "plan.bin")
    assert elsewhere.seen == []
    assert not (tmp_path / "plan.bin").exists()


def test_the_datastore_clients_download_still_goes_through_the_proxy_the_environment_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unlike a runner's, the CLI's and the controllers' datastore calls honour HTTP(S)_PROXY (httpx's trust_env),
    downloads included: where a proxy applies, the download is httpx's."""
    from burrito_py.datastore.client import DatastoreClient

    with serving(Script()) as proxy, serving(Script()) as datastore:
        proxy.answers.append((200, {}, b"via the proxy"))
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        for name in ("NO_PROXY", "no_proxy", "http_proxy"):
            monkeypatch.delenv(name, raising=False)
        with DatastoreClient(datastore.url, token=TOKEN) as client:
            client.download_plan("default", "app", "run-1", 1, "bin", tmp_path / "plan.bin")
    assert (tmp_path / "plan.bin").read_bytes() == b"via the proxy"
    assert [s.path for s in proxy.seen] == [f"{datastore.url}/api/v1/layers/default/app/runs/run-1/attempts/1/plan"
                                            "?format=bin"]
    assert datastore.seen == []
