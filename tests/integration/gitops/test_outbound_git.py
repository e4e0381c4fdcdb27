"""Git fetches and the outbound address guard, with real git, a real sshd and real HTTP servers on loopback:
credentials never follow a redirect to another host, a fetch connects to the address the guard checked (not to
whatever git would resolve), internal destinations are refused before any connection, and a failed connection
is one message whatever listens there."""

from __future__ import annotations

import base64
import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from burrito_py.git.credentials import credentials_from_data
from burrito_py.git.mirror import GitError, GitMirror
from burrito_py.outbound import LOOPBACK_NETWORKS, OutboundPolicy, OutboundRefused
from tests.support.git_repos import TestRepo, make_bare, make_repo
from tests.support.git_servers import HttpGitServer, SshGitServer, running_http_git_server, running_ssh_git_server

PASSWORD = "pw-redirected-Zq81"
SOURCE = "Secret team-a/git"
LOOPBACK = OutboundPolicy.of(LOOPBACK_NETWORKS)  # the servers listen on loopback: allowed explicitly


@dataclass
class Recorder:
    """An HTTP listener that asks for basic auth (as a git server does) and records every request's credentials."""

    port: int = 0
    seen: list[tuple[str, str | None]] = field(default_factory=list)


@contextlib.contextmanager
def recording_http(host: str, redirect_to: str | None = None) -> Iterator[Recorder]:
    recorder = Recorder()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            recorder.seen.append((self.path, self.headers.get("Authorization")))
            if redirect_to is not None:
                self.send_response(301)
                self.send_header("Location", f"{redirect_to}{self.path}")
            else:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    recorder.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def recording_tcp(answer: bytes | None = None) -> Iterator[tuple[int, list[bytes]]]:
    """A TCP listener on 127.0.0.1 recording what every connection sends first; it answers `answer` (None: hangs up
    at once)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.05)
    received: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                connection, _ = listener.accept()
                with connection:
                    if answer:
                        connection.sendall(answer)
                    connection.settimeout(0.5)
                    with contextlib.suppress(OSError):
                        received.append(connection.recv(4096))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], received
    finally:
        stop.set()
        thread.join(5)
        listener.close()


@pytest.fixture
def work(tmp_path: Path) -> TestRepo:
    repo = make_repo(tmp_path / "work")
    repo.commit({"layers/app/main.tf": "# app\n"}, "add a layer")
    return repo


@pytest.fixture
def server(tmp_path: Path, work: TestRepo) -> Iterator[HttpGitServer]:
    work.push(make_bare(tmp_path / "srv" / "infra.git"))
    with running_http_git_server(tmp_path / "srv", "alice", PASSWORD) as srv:
        yield srv


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshGitServer]:
    with running_ssh_git_server(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def test_credentials_never_follow_a_redirect_to_another_host(tmp_path: Path) -> None:
    """An allowed host redirects the fetch to one the attacker runs: git does not follow it, so the attacker's
    `401` never gets the credentials (before: git followed and its credential helper answered for any host)."""
    with recording_http("127.0.0.2") as attacker, \
            recording_http("127.0.0.1", redirect_to=f"http://127.0.0.2:{attacker.port}") as redirecting:
        url = f"http://127.0.0.1:{redirecting.port}/infra.git"
        credentials = credentials_from_data({"username": "alice", "password": PASSWORD,
                                             "allowedHosts": "http://127.0.0.1"}, url, SOURCE)
        with pytest.raises(GitError) as failed:
            GitMirror(tmp_path / "cache", url, outbound=LOOPBACK, fetch_timeout=60).fetch(credentials)
    secret = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    assert attacker.seen == [], f"the attacker received {attacker.seen} (the credentials are {secret})"
    assert len(redirecting.seen) == 1 and redirecting.seen[0][1] is None
    assert "redirects are not followed" in str(failed.value) and PASSWORD not in str(failed.value)


def test_an_https_fetch_connects_to_the_address_the_guard_checked(tmp_path: Path, server: HttpGitServer,
                                                                   work: TestRepo) -> None:
    """The name is one the system's resolver does not know: the fetch only works because git was pinned to the
    address the guard resolved and checked (git never resolves the name itself)."""
    url = f"http://git.attacker.test:{server.port}/infra.git"
    asked: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    credentials = credentials_from_data({"username": "alice", "password": PASSWORD,
                                         "allowedHosts": "http://git.attacker.test"}, url, SOURCE)
    mirror = GitMirror(tmp_path / "cache", url, outbound=OutboundPolicy.of(["127.0.0.1/32"]), resolver=resolver)
    mirror.fetch(credentials)
    assert mirror.resolve("main") == work.head and asked == ["git.attacker.test"]

    def rebound(host: str, port: int) -> list[str]:  # the same name, now also answering an address not allowed
        return ["127.0.0.1", "127.0.0.2"]

    with pytest.raises(OutboundRefused, match="it resolves to a loopback address"):
        GitMirror(tmp_path / "cache", url, outbound=OutboundPolicy.of(["127.0.0.1/32"]), resolver=rebound).fetch(
            credentials)


def test_an_ssh_fetch_connects_to_the_checked_address_and_verifies_the_host_key_by_name(
        tmp_path: Path, sshd: SshGitServer, work: TestRepo) -> None:
    bare = tmp_path / "ssh" / "infra.git"
    work.push(make_bare(bare))
    url = sshd.url_for(bare).replace("127.0.0.1", "git.attacker.test")
    known_hosts = sshd.known_hosts.replace("[127.0.0.1]", "[git.attacker.test]")
    credentials = credentials_from_data({"sshPrivateKey": sshd.client_key, "knownHosts": known_hosts,
                                         "allowedHosts": "git.attacker.test"}, url, SOURCE)
    mirror = GitMirror(tmp_path / "cache", url, outbound=LOOPBACK, resolver=lambda host, port: ["127.0.0.1"])
    mirror.fetch(credentials)
    assert mirror.resolve("main") == work.head


@pytest.mark.parametrize("kind", ["https", "ssh"])
def test_the_default_guard_refuses_an_internal_repository_before_connecting(tmp_path: Path, kind: str) -> None:
    with recording_tcp() as (port, received):
        url = f"http://127.0.0.1:{port}/infra.git" if kind == "https" else f"ssh://git@127.0.0.1:{port}/infra.git"
        for target in (url, url.replace(f"127.0.0.1:{port}", "169.254.169.254"),
                       url.replace(f"127.0.0.1:{port}", "git.team-a.svc.cluster.local")):
            mirror = GitMirror(tmp_path / "cache", target)  # the controllers' default: nothing internal
            with pytest.raises(OutboundRefused) as refused:
                mirror.fetch()
            assert "refused by the outbound address guard" in str(refused.value)
            assert "BURRITO_PY_OUTBOUND_ALLOWED_NETWORKS" in str(refused.value) and not mirror.exists()
    assert received == []  # nothing connected


@pytest.mark.parametrize("kind", ["https", "ssh"])
def test_a_failed_connection_is_one_message_whatever_listens_there(tmp_path: Path, kind: str) -> None:
    """Closed, hanging up at once, or speaking another protocol: "could not connect", so a repository's status is
    no port scanner even for destinations an operator allowed."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    messages = set()
    with recording_tcp() as (hang_up, _), recording_tcp(b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n" if
                                                         kind == "ssh" else b"SSH-2.0-OpenSSH_9.2\r\n") as (other, _):
        for port in (closed_port, hang_up, other):
            url = f"http://127.0.0.1:{port}/r.git" if kind == "https" else f"ssh://git@127.0.0.1:{port}/r.git"
            with pytest.raises(GitError) as failed:
                GitMirror(tmp_path / "cache", url, outbound=LOOPBACK, fetch_timeout=60).fetch()
            messages.add(str(failed.value).replace(str(port), "PORT"))
    assert len(messages) == 1, messages
    assert messages.pop().endswith(": could not connect")
