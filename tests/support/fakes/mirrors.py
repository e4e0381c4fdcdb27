"""A fake of the datastore's provider network mirror and tool mirror (issue 16), for the runner's tests.

One server on 127.0.0.1, HTTPS with a test CA (`tls.make_tls`), or plain http:

- `/providers/v1/healthz` (no auth; 503 when `healthy` is False);
- `/providers/v1/<host>/<namespace>/<type>/index.json` and `…/<version>.json` (bearer token);
- `/providers/v1/archives/<sha256>/<file>` (no auth);
- `/tools/v1/<tool>/versions` and `/tools/v1/<tool>/<version>/<os>/<arch>` (bearer token; the zip with
  `X-Burrito-Sha256`, or the sum set in `tool_sums` to lie).

Provider packages are synthetic (a zip holding `terraform-provider-<type>_v<version>`): `terraform init` checks
and unpacks them and never runs them. Every request is recorded with its Authorization header.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import ssl
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from burrito_py.datastore.providercache.hashes import file_sha256

from .registry import provider_zip as registry_zip
from .tls import make_tls

PLATFORMS = ("linux_amd64", "linux_arm64")


@dataclass(frozen=True)
class FakeCa:
    ca_pem: str  # trust this
    cert: Path  # the server's certificate, for 127.0.0.1 and localhost
    key: Path


def make_ca(directory: Path) -> FakeCa:
    tls = make_tls(directory)
    return FakeCa(tls.ca.read_text(), tls.cert, tls.key)


def provider_zip(type_: str, version: str) -> bytes:
    script = f"#!/bin/sh\n# fake {type_} {version}\nexit 1\n".encode()
    return registry_zip(type_, version, "linux_amd64", content=script)


def tool_zip(dest: Path, binary: Path, name: str) -> Path:
    """A release zip holding `binary` as `name` (stored, not deflated: a real terraform is ~90 MB)."""
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_STORED) as archive:
        archive.write(binary, name)
        archive.writestr("LICENSE.txt", "test\n")
    return dest


@dataclass
class Seen:
    path: str
    authorization: str | None


@dataclass
class FakeMirror:
    token: str | None = None  # required on the JSON and tool routes when set
    healthy: bool = True
    # (host, namespace, type) → versions; each version's package is provider_zip(type, version)
    providers: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    # tool → {version: release zip}; versions are listed newest first, as the datastore does
    tools: dict[str, dict[str, Path]] = field(default_factory=dict)
    tool_sums: dict[tuple[str, str], str] = field(default_factory=dict)  # (tool, version) → a sum to send instead
    requests: list[Seen] = field(default_factory=list)
    url: str = ""

    @property
    def provider_url(self) -> str:
        return self.url + "providers/v1/"

    @property
    def tool_url(self) -> str:
        return self.url + "tools/v1/"

    def authorizations(self, fragment: str) -> list[str | None]:
        return [seen.authorization for seen in self.requests if fragment in seen.path]


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("-")[0].split("."))


def _handler(mirror: FakeMirror) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def _send(self, status: int, body: bytes, content_type: str = "application/json",
                  headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def _json(self, value: object, status: int = 200) -> None:
            self._send(status, json.dumps(value).encode())

        def _authorized(self) -> bool:
            if mirror.token and self.headers.get("Authorization") != f"Bearer {mirror.token}":
                self._json({"detail": "unauthorized"}, 401)
                return False
            return True

        def do_GET(self) -> None:
            mirror.requests.append(Seen(self.path, self.headers.get("Authorization")))
            parts = self.path.strip("/").split("/")
            if parts[:2] == ["providers", "v1"]:
                self._providers(parts[2:])
            elif parts[:2] == ["tools", "v1"]:
                self._tools(parts[2:])
            else:
                self._json({"detail": "not found"}, 404)

        def _providers(self, parts: list[str]) -> None:
            if parts == ["healthz"]:
                self._json({"status": "ok"} if mirror.healthy else {"status": "down"}, 200 if mirror.healthy else 503)
                return
            if len(parts) == 3 and parts[0] == "archives":
                _, _, filename = parts
                type_, version = filename.split("_")[0].removeprefix("terraform-provider-"), filename.split("_")[1]
                self._send(200, provider_zip(type_, version), "application/zip")
                return
            if len(parts) != 4 or not self._authorized():
                if len(parts) != 4:
                    self._json({"detail": "not found"}, 404)
                return
            host, namespace, type_, leaf = parts
            versions = mirror.providers.get((host, namespace, type_))
            if versions is None:
                self._json({"detail": "not found"}, 404)
            elif leaf == "index.json":
                self._json({"versions": {v: {} for v in versions}})
            elif leaf.removesuffix(".json") in versions:
                version = leaf.removesuffix(".json")
                package = provider_zip(type_, version)
                digest = hashlib.sha256(package).hexdigest()
                archives = {
                    platform: {
                        "url": f"{mirror.provider_url}archives/{digest}/terraform-provider-{type_}_{version}_"
                        f"{platform}.zip",
                        "hashes": [f"zh:{digest}"],
                    }
                    for platform in PLATFORMS
                }
                self._json({"archives": archives})
            else:
                self._json({"detail": "not found"}, 404)

        def _tools(self, parts: list[str]) -> None:
            if not self._authorized():
                return
            releases = mirror.tools.get(parts[0]) if parts else None
            if releases is None:
                self._json({"detail": "not found"}, 404)
            elif parts[1:] == ["versions"]:
                self._json({"versions": sorted(releases, key=_version_key, reverse=True)})
            elif len(parts) == 4 and parts[1] in releases:
                archive = releases[parts[1]]
                digest = mirror.tool_sums.get((parts[0], parts[1])) or file_sha256(archive)
                self.send_response(200)
                self.send_header("Content-Type", "application/zip")
                self.send_header("Content-Length", str(archive.stat().st_size))
                self.send_header("X-Burrito-Sha256", digest)
                self.end_headers()
                with archive.open("rb") as handle:
                    shutil.copyfileobj(handle, self.wfile, 1024 * 1024)
            else:
                self._json({"detail": "not found"}, 404)

    return Handler


@contextmanager
def running_mirror(mirror: FakeMirror, tls: FakeCa | None = None) -> Iterator[FakeMirror]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(mirror))
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.cert, tls.key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    scheme = "https" if tls is not None else "http"
    mirror.url = f"{scheme}://127.0.0.1:{server.server_address[1]}/"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield mirror
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def closed_port_url() -> str:
    """An https URL on 127.0.0.1 where nothing listens (a mirror that is down)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"https://127.0.0.1:{port}/providers/v1/"
