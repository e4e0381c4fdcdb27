"""The API server's service proxy: `/api/v1/namespaces/{ns}/services/[scheme:]{name}[:port]/proxy/{path}`.

What kube-apiserver does, and so what this does:
- the request was authenticated and authorized first (RBAC resource `services/proxy`, the verb of the
  HTTP method, the name being the whole `[scheme:]name[:port]` segment, as RequestInfo parses it);
- the caller's `Authorization` header is not forwarded (kube-apiserver's authentication filter deletes it
  once it has authenticated the request), so a backend never sees the user's credentials;
- the port is the Service port's number or name (the only port when none is given), and the request goes to
  a Ready endpoint of that port (Endpoints, as kube-proxy would pick);
- no Ready endpoint: 503 `no endpoints available for service "<name>"`; an endpoint that cannot be reached:
  503 `error trying to reach service: ...`.
Bodies are streamed both ways, so a plan download does not sit in the emulator's memory.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import aiohttp
from aiohttp import web

from burrito_local.kube_errors import ApiError, bad_request
from burrito_local.workloads import ready_backends

Obj = dict[str, Any]

# Hop-by-hop headers (RFC 9110 §7.6.1) are never forwarded; Host names the backend, not the API server.
_HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "host", "content-length",
})
_NOT_FORWARDED = _HOP_BY_HOP | {"authorization"}
_turn = itertools.count()


def parse_target(segment: str) -> tuple[str, str, str]:
    """`[scheme:]name[:port]` → (scheme, name, port), as kube's SplitSchemeNamePort reads it."""
    parts = segment.split(":")
    if len(parts) == 1:
        scheme, name, port = "", parts[0], ""
    elif len(parts) == 2:
        scheme, name, port = "", parts[0], parts[1]
    elif len(parts) == 3 and parts[0] in ("http", "https"):
        scheme, name, port = parts
    else:
        raise bad_request(f"invalid service request {segment!r}")
    if not name:
        raise bad_request(f"invalid service request {segment!r}")
    return scheme or "http", name, port


def service_port(service: Mapping[str, Any], port: str) -> Mapping[str, Any]:
    """The Service port a request names (by number or name; the only one when none is given)."""
    ports = (service.get("spec") or {}).get("ports") or []
    name = service["metadata"]["name"]
    if not port:
        if len(ports) == 1:
            return dict(ports[0])
        raise ApiError(503, "ServiceUnavailable", f'no port given and service "{name}" has {len(ports)} ports')
    for candidate in ports:
        if str(candidate.get("port")) == port or candidate.get("name") == port:
            return dict(candidate)
    raise ApiError(503, "ServiceUnavailable", f'no service port "{port}" found for service "{name}"')


def pick_backend(service: Mapping[str, Any], endpoints: Mapping[str, Any] | None, port: str) -> tuple[str, int]:
    chosen = service_port(service, port)
    backends = ready_backends(endpoints, str(chosen.get("name") or ""))
    if not backends:
        raise ApiError(503, "ServiceUnavailable",
                       f'no endpoints available for service "{service["metadata"]["name"]}"')
    return backends[next(_turn) % len(backends)]


async def forward(request: web.Request, scheme: str, backend: tuple[str, int], path: str) -> web.StreamResponse:
    """Send `request` to `backend` at `path` (and the query string) and stream the answer back."""
    host, port = backend
    url = f"{scheme}://{host}:{port}/{path}"
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED}
    if request.content_length is not None:  # streamed with its length, not re-chunked
        headers["Content-Length"] = str(request.content_length)
    body = request.content if request.can_read_body else None
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
        try:
            upstream = await session.request(request.method, url, params=request.query, headers=headers,
                                             data=body, allow_redirects=False,
                                             ssl=False)  # kube-apiserver does not check a backend's certificate
        except (aiohttp.ClientError, OSError) as exc:
            raise ApiError(503, "ServiceUnavailable", f"error trying to reach service: {exc}") from None
        async with upstream:
            response = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP},
            )
            if upstream.headers.get("Content-Length") is not None:
                response.content_length = int(upstream.headers["Content-Length"])
            await response.prepare(request)
            async for chunk in upstream.content.iter_chunked(65536):
                await response.write(chunk)
            await response.write_eof()
            return response
