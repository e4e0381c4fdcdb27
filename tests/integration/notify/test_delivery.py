"""Delivery over real HTTP to a receiver on loopback: bodies arrive signed, retries keep their delivery id,
a refusal is final, Retry-After is honoured, and the URL (a credential) is never logged. Through the controllers'
own client (`notification_client`): the outbound address guard refuses internal destinations before any request,
redirects are not followed, and a failed connection says "could not connect" whatever the network answered."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from burrito_py.kube import pod_dns as dns
from burrito_py.notify.deliver import Target, deliver, notification_client
from burrito_py.notify.message import Notification
from burrito_py.notify.sign import DELIVERY_HEADER, SIGNATURE_HEADER, verify
from burrito_py.outbound import LOOPBACK_NETWORKS, AsyncGuardedTransport, OutboundPolicy

KEY = b"hmac-key-for-tests"
LOOPBACK = OutboundPolicy.of(LOOPBACK_NETWORKS)  # the receivers listen on loopback: allowed explicitly


class Receiver:
    def __init__(self, answers: list[tuple[int, dict[str, str]]], host: str = "127.0.0.1") -> None:
        self.answers = answers  # answered in order; the last one repeats
        self.requests: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.requests.append((dict(self.headers.items()), body))
                status, headers = receiver.answers[min(len(receiver.requests), len(receiver.answers)) - 1]
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://{host}:{self.port}/services/T000/B000/secret-token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver_factory() -> Iterator[Any]:
    made: list[Receiver] = []

    def make(*answers: tuple[int, dict[str, str]], host: str = "127.0.0.1") -> Receiver:
        made.append(Receiver(list(answers), host))
        return made[-1]

    yield make
    for receiver in made:
        receiver.server.shutdown()


NOTE = Notification("PolicyDenied", "default", "db", "sha256:aa", "Plan: 1 to add, 0 to change, 1 to destroy",
                    ("terraform_data.db",), 1, ("default/p/no-replace",), "verdict Denied", None,
                    datetime(2026, 11, 24, tzinfo=UTC))


async def send(target: Target, sleeps: list[float], policy: OutboundPolicy = LOOPBACK) -> Any:
    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with notification_client(policy, timeout=5) as client:
        return await deliver(target, NOTE, client=client, sleep=sleep)


@pytest.mark.parametrize("kind", ["slack", "teams", "webhook"])
async def test_bodies_arrive(receiver_factory: Any, kind: str) -> None:
    receiver = receiver_factory((200, {}))
    result = await send(Target(kind, receiver.url, KEY if kind == "webhook" else None), [])
    assert result.ok and result.attempts == 1
    ((headers, body),) = receiver.requests
    assert len(body) <= 1024 and "default" in body.decode()
    json.loads(body)
    if kind == "webhook":
        assert verify(body, headers[SIGNATURE_HEADER], KEY)


async def test_retries_keep_the_delivery_id_and_back_off(receiver_factory: Any, caplog: Any) -> None:
    receiver = receiver_factory((503, {}), (503, {}), (200, {}))
    sleeps: list[float] = []
    with caplog.at_level(logging.DEBUG):
        result = await send(Target("webhook", receiver.url, KEY), sleeps)
    assert result.ok and result.attempts == 3 and sleeps == [0.5, 1.0]
    assert len({h[DELIVERY_HEADER] for h, _ in receiver.requests}) == 1
    assert "secret-token" not in caplog.text and KEY.decode() not in caplog.text


async def test_a_refusal_is_final_and_retry_after_is_honoured(receiver_factory: Any, caplog: Any) -> None:
    refusing = receiver_factory((400, {}))
    with caplog.at_level(logging.DEBUG):
        result = await send(Target("slack", refusing.url), [])
    assert not result.ok and result.attempts == 1 and result.status_code == 400
    assert "secret-token" not in caplog.text and "secret-token" not in str(result)
    throttling = receiver_factory((429, {"Retry-After": "7"}), (200, {}))
    sleeps: list[float] = []
    assert (await send(Target("teams", throttling.url), sleeps)).ok and sleeps == [7.0]


async def test_an_unreachable_receiver_fails_after_its_attempts(caplog: Any) -> None:
    sleeps: list[float] = []
    with caplog.at_level(logging.DEBUG):
        result = await send(Target("slack", "http://127.0.0.1:9/hooks/secret-token"), sleeps)
    assert not result.ok and result.attempts == 5 and sleeps == [0.5, 1.0, 2.0, 4.0]
    assert "secret-token" not in caplog.text and "secret-token" not in (result.error or "")


@pytest.fixture
def hosts_file(tmp_path: Any) -> Iterator[Any]:
    """Names that resolve to loopback for this process, through the local kubelet's cluster DNS
    (burrito_py/kube/pod_dns.py: `socket.getaddrinfo` answers from a hosts file), as an attacker's DNS would answer."""
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 receiver.attacker.test\n")
    assert dns.install({dns.ENV: str(hosts)})
    yield hosts
    dns.uninstall()


async def test_internal_destinations_are_refused_before_any_request(receiver_factory: Any, hosts_file: Any,
                                                                      caplog: Any) -> None:
    receiver = receiver_factory((200, {}))
    urls = {
        f"http://127.0.0.1:{receiver.port}/hook": "127.0.0.1 is a loopback address",
        "http://169.254.169.254/latest/meta-data/": "169.254.169.254 is a link-local address",
        "http://hooks.team-a.svc.cluster.local/hook": "it is a cluster-internal or local name",
        f"http://receiver.attacker.test:{receiver.port}/hook": "it resolves to a loopback address",
        f"http://[::ffff:127.0.0.1]:{receiver.port}/hook": "is a loopback address (127.0.0.1)",
    }
    for url, why in urls.items():
        sleeps: list[float] = []
        with caplog.at_level(logging.DEBUG):
            result = await send(Target("webhook", url, KEY), sleeps, OutboundPolicy())  # the chart's default
        assert receiver.requests == [], f"{url} reached the receiver"
        assert not result.ok and result.refused and result.attempts == 1 and sleeps == []  # final: no retry
        assert why in (result.error or "") and "BURRITO_PY_OUTBOUND_ALLOWED_NETWORKS" in (result.error or "")
        assert "/hook" not in (result.error or "") and "meta-data" not in caplog.text
    assert receiver.requests == []


async def test_a_redirect_to_an_internal_address_is_not_followed(receiver_factory: Any) -> None:
    inside = receiver_factory((200, {}), host="127.0.0.2")
    redirecting = receiver_factory((302, {"Location": inside.url}))
    only_the_receiver = OutboundPolicy.of(["127.0.0.1/32"])
    result = await send(Target("slack", redirecting.url), [], only_the_receiver)
    assert not result.ok and result.status_code == 302 and result.attempts == 1
    assert len(redirecting.requests) == 1 and inside.requests == []


async def test_a_failed_connection_says_the_same_whatever_listens_there() -> None:
    """A closed port, a port that accepts and hangs up, and one that answers something that is not HTTP: one answer,
    so notifier status is no port scanner."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    hanging_up = socket.socket()
    hanging_up.bind(("127.0.0.1", 0))
    hanging_up.listen()
    garbage = socket.socket()
    garbage.bind(("127.0.0.1", 0))
    garbage.listen()

    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            for listener, answer in ((hanging_up, b""), (garbage, b"SSH-2.0-OpenSSH_9.2\r\n")):
                with contextlib.suppress(OSError):  # nobody came (or the test is over)
                    listener.settimeout(0.05)
                    connection, _ = listener.accept()
                    connection.sendall(answer)
                    connection.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    errors = set()
    try:
        for port in (closed_port, hanging_up.getsockname()[1], garbage.getsockname()[1]):
            result = await send(Target("slack", f"http://127.0.0.1:{port}/hook"), [])
            assert not result.ok and result.attempts == 5
            errors.add(result.error)
    finally:
        stop.set()
        server.join(5)
        hanging_up.close()
        garbage.close()
    assert errors == {"could not connect"}


async def test_the_connection_goes_to_the_address_that_was_checked(receiver_factory: Any) -> None:
    """DNS rebinding: a name is resolved once per connection, every answer checked, and the socket opened to the
    checked address; the system's resolver never sees the name again."""
    receiver = receiver_factory((200, {}))
    asked: list[str] = []

    def resolver(host: str, port: int) -> list[str]:  # a name only this resolver knows
        asked.append(host)
        return ["127.0.0.1"]

    policy = OutboundPolicy.of(["127.0.0.1/32"])
    url = receiver.url.replace("127.0.0.1", "rebind.attacker.test")
    async with httpx.AsyncClient(transport=AsyncGuardedTransport(policy, resolver=resolver)) as client:
        assert (await deliver(Target("slack", url), NOTE, client=client)).ok
    assert asked == ["rebind.attacker.test"] and len(receiver.requests) == 1
    assert receiver.requests[0][0]["Host"].startswith("rebind.attacker.test")

    def rebinding(host: str, port: int) -> list[str]:  # one public answer and one internal: refused whole
        return ["93.184.215.14", "127.0.0.2"]

    async with httpx.AsyncClient(transport=AsyncGuardedTransport(policy, resolver=rebinding)) as client:
        result = await deliver(Target("slack", url), NOTE, client=client)
    assert result.refused and "it resolves to a loopback address" in (result.error or "")
    assert len(receiver.requests) == 1


@pytest.mark.parametrize("url", ["https://hooks.example:secret-token/x", "https://[secret-token]/x",
                                 "https://hooks.example/secret-token\x00"])
async def test_a_malformed_url_is_refused_without_quoting_it(url: str, caplog: Any) -> None:
    """The URL comes from a Secret a tenant's notifier names: httpx's InvalidURL (not an HTTPError) escaped
    `deliver`, so no outcome was recorded, and its text (`Invalid port: 'secret-token'`) went to the log."""
    with caplog.at_level(logging.DEBUG):
        result = await send(Target("slack", url), [])
    assert not result.ok and result.refused and result.error == "the URL is not a valid URL"
    assert "secret-token" not in caplog.text


@pytest.mark.parametrize("spelling", ["HTTP://127.0.0.1:{port}/hook/secret-token",
                                      "http://127.0.0.1:{port}/hook/secret-token?a=b c"])
async def test_attack_a_url_spelt_otherwise_than_httpx_writes_it_is_not_logged(
        receiver_factory: Any, caplog: Any, spelling: str) -> None:
    """The URL was hidden from httpx's request line by its exact text, but httpx logs its own normalised form
    (`http://…`, spaces encoded), which a Secret holding `HTTP://…` never matched: the line showed the token."""
    receiver = receiver_factory((200, {}))
    with caplog.at_level(logging.DEBUG):
        result = await send(Target("slack", spelling.format(port=receiver.port)), [])
    assert result.ok and len(receiver.requests) == 1
    logged = [f"{r.name}: {r.getMessage()}" for r in caplog.records if "secret-token" in r.getMessage()]
    assert logged == [], logged
