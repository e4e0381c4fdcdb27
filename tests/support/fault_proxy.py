"""A fault-injecting reverse proxy in front of the session's kube-apiserver (docs/architecture.md §22.8): what
the emulator's `ApiServer.inject_fault` and `ApiServer.requests` give the fault tests, on the real control
plane.

The components under test (the controllers; their kubeconfig names the proxy) talk to it; everything else (the
test's own client, the kubelet, the datastore's TokenReviews) talks to kube-apiserver directly. It serves HTTPS
with a certificate of its own signed by the cluster's CA (the kubeconfig's CA stays valid), forwards every
request to kube-apiserver with the client's own headers — the `Authorization` bearer token unchanged, so RBAC
applies to each component as it would without the proxy — and streams responses back as they come (watches).
A client certificate cannot be forwarded (the TLS session ends here): its clients must carry bearer tokens.

`inject_fault(method, path_regex, status, after=...)` answers the next matching requests with a Status of that
code, either instead of forwarding them or after kube-apiserver carried them out (a lost response);
`requests` is the log of what came through, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import aiohttp
import yaml
from aiohttp import web
from burrito_local.kube_errors import reason_for
from burrito_local.kube_tls import CertificateAuthority

# RFC 9110 §7.6.1: hop-by-hop headers are the connection's, not the message's; aiohttp sets its own.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                         "transfer-encoding", "upgrade", "host", "content-length"})


@dataclass(frozen=True)
class RequestRecord:
    """One request that came through: the emulator's `RequestRecord` fields, plus the status the client got."""

    method: str
    path: str
    query: dict[str, str]
    time: float  # time.time() when it arrived
    status: int = 0  # what the client was answered (0 until the response's head went out)


@dataclass
class Fault:
    method: str  # upper case, or "*"
    pattern: re.Pattern[str]
    status: int | None
    delay: float
    remaining: int
    # Forward the request, let kube-apiserver carry it out, then answer `status`: the write happened, the
    # client never heard (a lost response).
    after: bool = False


class FaultProxy:
    """One proxy on a free port of `host`, its own asyncio loop in a daemon thread. Start, then point a
    kubeconfig at `url` (`write_kubeconfig`)."""

    def __init__(self, upstream: str, ca_pem: bytes, ca_key_pem: bytes, workdir: Path, host: str = "127.0.0.1",
                 ) -> None:
        self.upstream = upstream.rstrip("/")
        self.workdir = workdir  # its serving certificate and key
        self.host = host
        self.port = 0
        self._ca = CertificateAuthority(ca_pem, ca_key_pem)
        self._lock = threading.Lock()
        self._requests: list[RequestRecord] = []
        self._faults: list[Fault] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    # -- the rule API (the emulator's, word for word) -------------------------------------------------
    def inject_fault(self, method: str, path_regex: str, status: int | None = None, delay: float = 0.0,
                     times: int = 1, after: bool = False) -> None:
        """Answer the next `times` requests matching (method or "*", regex searched in the path) with a
        Status of `status`, after `delay` seconds (a delay alone lets the request through, late).

        `after`: forward the request first and lose kube-apiserver's response (the client sees only `status`)."""
        with self._lock:
            self._faults.append(Fault(method.upper(), re.compile(path_regex), status, delay, times, after))

    @property
    def requests(self) -> list[RequestRecord]:
        """What came through so far, oldest first (a copy: the proxy's thread appends to the log)."""
        with self._lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> Self:
        started = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._start())
            except BaseException as exc:  # handed to the starting thread, which raises it
                failure.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self._stop())
            loop.close()

        self._thread = threading.Thread(target=main, name="fault-proxy", daemon=True)
        self._thread.start()
        started.wait(30)
        if failure:
            raise RuntimeError(f"the fault proxy could not start: {failure[0]}") from failure[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(15)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def write_kubeconfig(self, source: Path, target: Path) -> Path:
        """`source` with its clusters' server replaced by the proxy's URL (the user, its token and the CA
        unchanged: the proxy's certificate is the cluster CA's)."""
        config = yaml.safe_load(source.read_text())
        for cluster in config.get("clusters") or ():
            cluster["cluster"]["server"] = self.url
            if not cluster["cluster"].get("certificate-authority-data") and \
                    not cluster["cluster"].get("certificate-authority"):
                raise ValueError(f"{source}: the cluster has no CA to verify the proxy with")
        for user in config.get("users") or ():
            fields = user.get("user") or {}
            if "client-certificate-data" in fields or "client-certificate" in fields:
                raise ValueError(f"{source}: a client certificate cannot pass through the proxy; use a token")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch(mode=0o600)
        target.write_text(yaml.safe_dump(config))
        return target

    async def _start(self) -> None:
        upstream_tls = ssl.create_default_context(cadata=self._ca.cert_pem.decode())
        # No timeout: watches stay open as long as the client keeps them; no decompression: bytes pass as sent.
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=upstream_tls, limit=0),
                                              timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False)
        cert, key = self._ca.issue_server("burrito-py-fault-proxy", [self.host], days=2)
        serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "tls.crt").write_bytes(cert)
        (self.workdir / "tls.key").touch(mode=0o600)
        (self.workdir / "tls.key").write_bytes(key)
        serving.load_cert_chain(self.workdir / "tls.crt", self.workdir / "tls.key")
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a client that hangs up (a stopped watch) ends its upstream request too.
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0,
                                     handler_cancellation=True)
        await self._runner.setup()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((self.host, 0))
        self.port = int(listener.getsockname()[1])
        await web.SockSite(self._runner, listener, ssl_context=serving).start()

    async def _stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- forwarding ------------------------------------------------------------------------------------
    def _take_fault(self, request: web.Request) -> tuple[int, Fault | None]:
        with self._lock:
            self._requests.append(RequestRecord(request.method, request.path, dict(request.query), time.time()))
            index = len(self._requests) - 1
            fault = next((f for f in self._faults
                          if f.remaining > 0 and f.method in (request.method, "*") and f.pattern.search(request.path)),
                         None)
            if fault is not None:
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
        return index, fault

    def _answered(self, index: int, request: web.Request, status: int) -> None:
        with self._lock:
            if index < len(self._requests) and self._requests[index].path == request.path:
                old = self._requests[index]
                self._requests[index] = RequestRecord(old.method, old.path, old.query, old.time, status)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        index, fault = self._take_fault(request)
        if fault is not None and fault.delay:
            await asyncio.sleep(fault.delay)
        if fault is not None and fault.status is not None and not fault.after:
            self._answered(index, request, fault.status)
            return _status(fault.status, "injected fault")
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        body = await request.read()
        try:
            upstream = await self._session.request(request.method, self.upstream + request.raw_path, headers=headers,
                                                   data=body if body else None, allow_redirects=False)
        except aiohttp.ClientError as exc:
            self._answered(index, request, 502)
            return _status(502, f"the fault proxy could not reach kube-apiserver: {exc}")
        async with upstream:
            if fault is not None and fault.after and fault.status is not None:
                await upstream.read()  # carried out in full; its answer is lost
                self._answered(index, request, fault.status)
                return _status(fault.status, "injected fault after the request was carried out")
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in _HOP_BY_HOP:
                    response.headers.add(key, value)
            await response.prepare(request)
            self._answered(index, request, upstream.status)
            with contextlib.suppress(ConnectionResetError, aiohttp.ClientPayloadError):
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)  # each watch event as kube-apiserver sends it
            await response.write_eof()
            return response


def _status(code: int, what: str) -> web.Response:
    reason = reason_for(code)
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": reason,
            "message": f"{what}: {reason}", "code": code}
    return web.Response(status=code, text=json.dumps(body), content_type="application/json")
