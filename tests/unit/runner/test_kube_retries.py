"""The runner's API calls (reads only) survive one transient failure (issue 11, item 4): 5xx, 429 and
unreachable are retried with a bounded backoff; 4xx are not."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from burrito_py.runner.kube import ApiConfig, Kube, KubeError, backoff, retryable


class _Server:
    """A real HTTP server answering each request with the next scripted status (then 200)."""

    def __init__(self, statuses: list[int]) -> None:
        self.scripted = list(statuses)
        self.statuses = list(statuses)
        self.seen: list[tuple[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.seen.append((self.command, body.decode()))
                status = outer.statuses.pop(0) if outer.statuses else 200
                payload = json.dumps({"kind": "Status", "message": f"scripted {status}"} if status >= 400
                                     else {"metadata": {"name": "x"}}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _answer

            def log_message(self, *_: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[_Server]:
    s = _Server(request.param)
    yield s
    s.httpd.shutdown()


@pytest.mark.parametrize("server", [[500], [503, 429], [502, 500, 504]], indirect=True)
def test_transient_statuses_are_retried(server: _Server) -> None:
    kube = Kube(ApiConfig(server.url), base_delay=0.01)
    try:
        assert kube.get("terraformlayers", "default", "app", "TerraformLayer") == {"metadata": {"name": "x"}}
    finally:
        kube.close()
    assert [method for method, _ in server.seen] == ["GET"] * len(server.seen)
    assert len(server.seen) == len(server.scripted) + 1


@pytest.mark.parametrize("server", [[403], [404], [422]], indirect=True)
def test_client_errors_are_not_retried(server: _Server) -> None:
    kube = Kube(ApiConfig(server.url), base_delay=0.01)
    try:
        with pytest.raises(KubeError) as failed:
            kube.get("terraformlayers", "default", "app", "TerraformLayer")
    finally:
        kube.close()
    assert len(server.seen) == 1
    assert failed.value.status == server.scripted[0]


@pytest.mark.parametrize("server", [[500] * 10], indirect=True)
def test_retries_are_bounded(server: _Server) -> None:
    kube = Kube(ApiConfig(server.url), retries=4, base_delay=0.01)
    try:
        with pytest.raises(KubeError, match=r"HTTP 500 scripted 500 \(after 4 tries\)") as failed:
            kube.get("terraformlayers", "default", "app", "TerraformLayer")
    finally:
        kube.close()
    assert len(server.seen) == 4
    assert failed.value.status == 500


def test_unreachable_is_retried_then_reported() -> None:
    kube = Kube(ApiConfig("http://127.0.0.1:1"), retries=3, base_delay=0.01)
    try:
        with pytest.raises(KubeError, match=r"unreachable .*\(after 3 tries\)") as failed:
            kube.get("terraformlayers", "default", "app", "TerraformLayer")
    finally:
        kube.close()
    assert failed.value.status is None


def test_decisions() -> None:
    assert [retryable(s) for s in (None, 429, 500, 503, 400, 403, 404, 409, 422)] == [True] * 4 + [False] * 5
    assert [backoff(n) for n in range(6)] == [0.25, 0.5, 1.0, 2.0, 4.0, 4.0]
    assert backoff(0, "3") == 3.0
    assert backoff(0, "120") == 4.0  # capped: the whole retry stays bounded
    assert backoff(1, "Wed, 21 Oct 2015 07:28:00 GMT") == 0.5  # a date: the usual backoff
