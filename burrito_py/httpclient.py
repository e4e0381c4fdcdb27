"""A small HTTP/1.1 client on the standard library's `http.client`: the runner's few calls to the Kubernetes API
(`runner/kube.py`) and the datastore (`runner/store.py`), where importing httpx and building its first client cost
a small plan ~0.12 s CPU of the runner's ~0.26 s (issue 31, docs/architecture.md §14 "Runner start-up costs"); and
`DatastoreClient`'s downloads to a file, which it reads 1 MiB at a time where httpx reads 64 KiB (§10.7).

One `Http` speaks to one origin, the one it was made for: it follows no redirect, uses no proxy from the
environment (the runner's calls go to in-cluster services; a proxy meant for terraform's downloads must not see
the bearer token), and sends its headers (the token) to that origin only. TLS is verified with the context given
(the pod's service-account CA, a kubeconfig's CA) or, for `https://` without one, exactly as httpx's default:
`SSL_CERT_FILE`, else `SSL_CERT_DIR`, else certifi's bundle. Each call has the timeout given for connecting and
for each read or write. Connections are kept alive and reused (a few threads upload at once, each on its own
connection); one the server has closed while idle is dropped before use, not failed on. Retries are the
callers' (their policies differ: §9 for the API, §10 for the datastore)."""

from __future__ import annotations

import http.client
import os
import select
import socket
import ssl
import threading
from collections.abc import Mapping
from email.message import Message
from typing import IO, Any, NamedTuple
from urllib.parse import urlsplit

__all__ = ["Answer", "Http", "TransportError", "default_context"]

BLOCK_SIZE = 1024 * 1024  # what one send or receive moves: a file streams in these, never read whole


class TransportError(Exception):
    """No answer: the connection, a read or a write failed or timed out. `str()` is `<exception type>: <message>`
    of the cause, as httpx's errors were reported."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__)
        self.cause = cause


class Answer(NamedTuple):
    status: int
    reason: str
    headers: Message  # case-insensitive `get`
    body: bytes  # empty when the body went to the sink


def default_context() -> ssl.SSLContext:
    """httpx's `verify=True` (0.28, `trust_env`): `SSL_CERT_FILE`, else `SSL_CERT_DIR`, else certifi's bundle."""
    cert_file, cert_dir = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    if cert_file:
        return ssl.create_default_context(cafile=cert_file)
    if cert_dir:
        return ssl.create_default_context(capath=cert_dir)
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


class Http:
    """Calls to `base_url` (`http://` or `https://`, with an optional path prefix); `headers` go with every call."""

    def __init__(self, base_url: str, headers: Mapping[str, str] | None = None,
                 context: ssl.SSLContext | None = None, timeout: float = 30.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{base_url!r} is not an http:// or https:// URL")
        self.https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port
        self._prefix = parts.path.rstrip("/")
        self._headers = dict(headers or {})
        self._timeout = timeout
        # Plain http needs no TLS context; building the default one (loading the CA bundle) costs tens of ms.
        self._context = (context or default_context()) if self.https else None
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def _connection(self) -> http.client.HTTPConnection:
        with self._lock:
            while self._idle:
                connection = self._idle.pop()
                if _usable(connection):
                    return connection
                connection.close()
        if self._context is not None:
            return _HTTPSConnection(self._host, self._port, self._context, timeout=self._timeout, blocksize=BLOCK_SIZE)
        return _HTTPConnection(self._host, self._port, timeout=self._timeout, blocksize=BLOCK_SIZE)

    def request(self, method: str, path: str, body: bytes | IO[bytes] | None = None,
                headers: Mapping[str, str] | None = None, sink: IO[bytes] | None = None) -> Answer:
        """One call; `path` is under the base URL's path. A file `body` is streamed (give its Content-Length, else
        it goes chunked). With `sink`, a success's body (status < 400) is written there as it arrives; an error's
        is read into the answer. Raises TransportError when there is no complete answer."""
        sent = {**self._headers, **(headers or {})}
        connection = self._connection()
        try:
            connection.request(method, self._prefix + path, body=body, headers=sent)
            response = connection.getresponse()
            if sink is not None and response.status < 400:
                # Into one reused block: a new bytes object per read (an allocation and a copy per MiB) held the
                # runner's 50 MiB download at 0.79x boto3's get_object, 0.93x without (issue 31, bench_datastore).
                # So a sink must copy what it is given, as a file does.
                block = bytearray(BLOCK_SIZE)
                view = memoryview(block)
                while size := response.readinto(block):
                    sink.write(view[:size])
                content = b""
            else:
                content = response.read()
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise TransportError(exc) from None
        except BaseException:
            connection.close()
            raise
        if response.will_close:
            connection.close()
        else:
            with self._lock:
                self._idle.append(connection)
        return Answer(response.status, response.reason, response.headers, content)


def _wire_name(host: str) -> str | bytes:
    """The host as the resolver and TLS are given it. An ASCII name as bytes: what the `idna` codec would make of
    it, without importing that codec (with `stringprep` and `unicodedata`, ~3 ms of every runner's start-up,
    issue 31). Anything else goes as it is, through the codec."""
    return host.encode("ascii") if host.isascii() else host


def _create_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
    return socket.create_connection((_wire_name(address[0]), address[1]), *args, **kwargs)  # type: ignore[arg-type]


class _HTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = _create_connection  # the standard library's seam for exactly this


class _HTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int | None, context: ssl.SSLContext, **kwargs: Any) -> None:
        super().__init__(host, port, context=context, **kwargs)
        self._create_connection = _create_connection
        self._tls = context

    def connect(self) -> None:
        # http.client's own `connect`, as it is without a proxy tunnel (`Http` never tunnels), with the name as
        # `_wire_name` gives it: the certificate is still checked against exactly this host.
        http.client.HTTPConnection.connect(self)
        self.sock = self._tls.wrap_socket(self.sock, server_hostname=_wire_name(self.host))


def _usable(connection: http.client.HTTPConnection) -> bool:
    """An idle kept-alive connection is usable when the server has not closed it: nothing to read on it (EOF, or
    bytes nobody asked for, would be readable)."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable
