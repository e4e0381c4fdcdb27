"""Attack: an outsider holds the public server's connections open by sending request headers a byte at a time (a
slowloris), or a request body that stops half way. The server now closes either after its timers
(`BURRITO_PY_SERVER_HEADER_TIMEOUT_SECONDS`, `..._READ_TIMEOUT_SECONDS`: docs/architecture.md §11.2, §24), as the
datastore does (§10.7); before, uvicorn kept both for as long as the client liked."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import httpx
from burrito_local.apiserver import ApiServer

from burrito_py.server.serving import running_server
from burrito_py.server.settings import ServerSettings
from tests.support.slow_client import closed_within

PATIENCE = 15.0  # well above the 1 s timers: a connection kept open is told apart from one closed, under load too


def _settings(**overrides: float) -> ServerSettings:
    from tests.conftest import KUBECONFIG_PATH

    return ServerSettings(host="127.0.0.1", port=0, kubeconfig=KUBECONFIG_PATH, auth_enabled=False,
                          datastore_url="http://127.0.0.1:9", **overrides)


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80))


def test_attack_a_slowloris_and_a_stalled_body_lose_their_connection(apiserver: ApiServer) -> None:
    with running_server(_settings(header_timeout_seconds=1, read_timeout_seconds=1)) as url:
        slow = _connect(url)
        try:
            headers = b"GET /ui/login HTTP/1.1\r\nHost: server\r\nX-Slow: " + b"a" * 200
            closed = closed_within(slow, PATIENCE, trickle=headers)
        finally:
            slow.close()
        assert closed is not None and closed < 6, f"headers sent a byte every 0.2 s kept the connection ({closed})"
        stalled = _connect(url)
        try:
            stalled.sendall(b"POST /api/layers/team-a/app/sync HTTP/1.1\r\nHost: server\r\nContent-Length: 100000\r\n"
                            b"Content-Type: application/json\r\n\r\n{")
            closed = closed_within(stalled, PATIENCE)
        finally:
            stalled.close()
        assert closed is not None and closed < 6, "a body that stopped kept the connection"
        assert httpx.get(url + "/healthz", timeout=PATIENCE).status_code == 200
