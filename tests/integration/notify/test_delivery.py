"""Delivery over real HTTP to a receiver on loopback: bodies arrive signed, retries keep their delivery id,
a refusal is final, Retry-After is honoured, and the URL (a credential) is never logged."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from burrito_py.notify.deliver import Target, deliver
from burrito_py.notify.message import Notification
from burrito_py.notify.sign import DELIVERY_HEADER, SIGNATURE_HEADER, verify

KEY = b"hmac-key-for-tests"


class Receiver:
    def __init__(self, answers: list[tuple[int, dict[str, str]]]) -> None:
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

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/T000/B000/secret-token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver_factory() -> Iterator[Any]:
    made: list[Receiver] = []

    def make(*answers: tuple[int, dict[str, str]]) -> Receiver:
        made.append(Receiver(list(answers)))
        return made[-1]

    yield make
    for receiver in made:
        receiver.server.shutdown()


NOTE = Notification("PolicyDenied", "default", "db", "sha256:aa", "Plan: 1 to add, 0 to change, 1 to destroy",
                    ("terraform_data.db",), 1, ("default/p/no-replace",), "verdict Denied", None,
                    datetime(2026, 11, 24, tzinfo=UTC))


async def send(target: Target, sleeps: list[float]) -> Any:
    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with httpx.AsyncClient(timeout=5) as client:
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
