"""Upstream clients: Terraform provider registries (the Provider Registry Protocol) and the release sites of
Terraform and OpenTofu. Every byte read from upstream is counted (`UPSTREAM_BYTES`).

Registry protocol: service discovery at `https://<host>/.well-known/terraform.json` (`providers.v1`), then
`<base><namespace>/<type>/versions` and `<base><namespace>/<type>/<version>/download/<os>/<arch>` (filename,
download_url, shasums_url, shasums_signature_url, shasum, signing_keys). Relative URLs are resolved against the
document that gave them.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx

from burrito_py.datastore.providercache.metrics import UPSTREAM_BYTES

__all__ = ["Upstream", "UpstreamError", "ssl_context"]

MAX_DOCUMENT = 16 * 1024 * 1024


class UpstreamError(Exception):
    """Upstream refused, failed, or answered something unusable; the message names the URL."""


def ssl_context(extra_ca_file: Path | None) -> ssl.SSLContext:
    """The system's CAs, plus `extra_ca_file` (a private registry's CA; the tests' CA)."""
    context = ssl.create_default_context()
    if extra_ca_file is not None:
        context.load_verify_locations(cafile=str(extra_ca_file))
    return context


class Upstream:
    def __init__(self, verify: ssl.SSLContext, timeout: float = 60.0,
                 registry_urls: Mapping[str, str] | None = None) -> None:
        """`registry_urls`: registry host name → where it is really served (`https://host:port`), for a private
        registry reached at another address than its name, and for tests."""
        self.http = httpx.AsyncClient(verify=verify, timeout=timeout, follow_redirects=True,
                                      headers={"User-Agent": "burrito-py-provider-cache"})
        self.registry_urls = {k.lower(): v.rstrip("/") for k, v in (registry_urls or {}).items()}
        self._bases: dict[str, str] = {}

    async def close(self) -> None:
        await self.http.aclose()

    async def document(self, url: str) -> Any:
        """A JSON document (at most 16 MiB)."""
        raw = await self.fetch(url, MAX_DOCUMENT)
        try:
            import json

            return json.loads(raw)
        except ValueError:
            raise UpstreamError(f"{url}: not JSON") from None

    async def fetch(self, url: str, limit: int) -> bytes:
        chunks: list[bytes] = []
        await self._stream(url, limit, chunks.append)
        return b"".join(chunks)

    async def fetch_to(self, url: str, dest: Path, limit: int) -> int:
        with dest.open("wb") as handle:
            return await self._stream(url, limit, handle.write)

    async def _stream(self, url: str, limit: int, sink: Any) -> int:
        size = 0
        try:
            async with self.http.stream("GET", url) as response:
                if response.status_code != 200:
                    raise UpstreamError(f"{url}: HTTP {response.status_code}")
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    UPSTREAM_BYTES.inc(len(chunk))
                    if size > limit:
                        raise UpstreamError(f"{url}: larger than {limit} bytes")
                    sink(chunk)
        except httpx.HTTPError as exc:
            raise UpstreamError(f"{url}: {type(exc).__name__}: {exc}") from None
        return size

    # -- the provider registry protocol ----------------------------------------------------------------------
    async def providers_base(self, hostname: str) -> str:
        if hostname not in self._bases:
            discovery = f"{self.registry_urls.get(hostname, f'https://{hostname}')}/.well-known/terraform.json"
            found = await self.document(discovery)
            base = found.get("providers.v1") if isinstance(found, Mapping) else None
            if not isinstance(base, str):
                raise UpstreamError(f"{discovery}: no providers.v1 service")
            self._bases[hostname] = urljoin(discovery, base if base.endswith("/") else base + "/")
        return self._bases[hostname]

    async def versions(self, hostname: str, namespace: str, type_: str) -> dict[str, list[str]]:
        """Version → platforms (`<os>_<arch>`)."""
        url = f"{await self.providers_base(hostname)}{namespace}/{type_}/versions"
        found = await self.document(url)
        entries = found.get("versions") if isinstance(found, Mapping) else None
        if not isinstance(entries, list):
            raise UpstreamError(f"{url}: no versions list")
        versions: dict[str, list[str]] = {}
        for entry in entries:
            if isinstance(entry, Mapping) and isinstance(entry.get("version"), str):
                versions[entry["version"]] = [f"{p.get('os')}_{p.get('arch')}" for p in entry.get("platforms") or ()
                                              if isinstance(p, Mapping)]
        return versions

    async def download(self, hostname: str, namespace: str, type_: str, version: str, platform: str
                       ) -> dict[str, Any]:
        """The registry's download document, its URLs made absolute."""
        os_, _, arch = platform.partition("_")
        url = f"{await self.providers_base(hostname)}{namespace}/{type_}/{version}/download/{os_}/{arch}"
        found = await self.document(url)
        if not isinstance(found, Mapping) or not all(isinstance(found.get(k), str) for k in
                                                      ("filename", "download_url", "shasums_url", "shasum")):
            raise UpstreamError(f"{url}: lacks filename, download_url, shasums_url or shasum")
        info = dict(found)
        for key in ("download_url", "shasums_url", "shasums_signature_url"):
            if isinstance(info.get(key), str):
                info[key] = urljoin(url, info[key])
        return info
