"""Terraform and OpenTofu release archives, read through and checksum-verified (docs/architecture.md §10.5), so
a runner start makes no request to GitHub's API (tenv lists OpenTofu versions through it; burrito #329).

- Terraform: versions from `<terraform_url>/terraform/index.json`; `terraform_<v>_<os>_<arch>.zip` and
  `terraform_<v>_SHA256SUMS` under `<terraform_url>/terraform/<v>/` (releases.hashicorp.com).
- OpenTofu: versions from `get.opentofu.org/tofu/api.json`; `tofu_<v>_<os>_<arch>.zip` and
  `tofu_<v>_SHA256SUMS` under `<opentofu_url>/v<v>/` (GitHub release downloads, not its API).
- Terragrunt: versions from its releases list (GitHub's releases API shape, `[{tag_name: "v<v>"}]`, read by the
  datastore once per TTL, never by a runner); the bare binary `terragrunt_<os>_<arch>` and `SHA256SUMS` under
  `<terragrunt_url>/v<v>/` (GitHub release downloads).

Stored as `tools/<tool>/<version>/<file>` with `<file>.sha256`; an archive whose SHA-256 is not the one in
`SHA256SUMS` is never stored nor served. `<file>.served` records when the archive was last served (written at most
every `LAST_USED_EVERY` per replica): eviction (`max_bytes`) drops the least recently served archives first, never
the one just stored; an evicted archive is read through again on its next request.

Only Linux platforms a runner can run (`mirror_arch`: amd64, arm64) are served: runner pods are Linux, and every
other platform would only multiply what a caller can make the datastore download and store.
"""

from __future__ import annotations

import asyncio
import logging
import re
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import NamedTuple

from burrito_py.datastore.providercache.cache import (
    LAST_USED_EVERY,
    MAX_ARCHIVE,
    NotFound,
    Refused,
    SingleFlight,
    _counted,
    _file_chunks,
    read_json,
    write_json,
)
from burrito_py.datastore.providercache.hashes import ShasumsError, file_sha256, parse_shasums
from burrito_py.datastore.providercache.metrics import OBJECTS, REQUESTS
from burrito_py.datastore.providercache.upstream import MAX_DOCUMENT, Upstream, UpstreamError
from burrito_py.datastore.storage import Storage
from burrito_py.plans.versions import InvalidVersionConstraint, Version

__all__ = ["TOOLS", "TenvRequest", "ToolCache", "media_type", "tenv_listing", "tenv_request"]

log = logging.getLogger(__name__)
TOOLS = ("terraform", "opentofu", "terragrunt")
PLATFORM = re.compile(r"^linux_(amd64|arm64)$")  # what runner pods run (runner/tools.py mirror_arch)
RUNNER_PLATFORMS = ("linux_amd64", "linux_arm64")
STRICT_VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$")


# Where tenv looks in its "direct" install mode under a remote URL (read in tenv v4's retrievers), per tool: the
# release listing (its "html" list mode reads the version out of each link) holds one folder per version.
TENV_RELEASES = {
    "opentofu": ("opentofu", "opentofu", "releases", "download"),
    "terraform": ("terraform",),
    "terragrunt": ("gruntwork-io", "terragrunt", "releases", "download"),
}


class TenvRequest(NamedTuple):
    """A path under the tenv layout: `file` None is the tool's release listing."""

    tool: str
    version: str | None = None
    file: str | None = None


def tenv_request(path: str) -> TenvRequest | None:
    """What a path under the tenv layout asks for (pure); None for anything else. A version folder is
    `v<version>` for OpenTofu and Terragrunt (GitHub's release tags), `<version>` for Terraform."""
    parts = [part for part in path.split("/") if part]
    for tool, prefix in TENV_RELEASES.items():
        if tuple(parts[:len(prefix)]) != prefix:
            continue
        rest = parts[len(prefix):]
        if not rest:
            return TenvRequest(tool)
        if len(rest) != 2:
            return None
        folder, file = rest
        version = folder if tool == "terraform" else folder.removeprefix("v")
        if (tool != "terraform" and not folder.startswith("v")) or not STRICT_VERSION.fullmatch(version):
            return None
        return TenvRequest(tool, version, file)
    return None


def tenv_listing(tool: str, versions: list[str]) -> str:
    """The release listing tenv's html list mode reads: a link per version folder."""
    tag = "" if tool == "terraform" else "v"
    links = "\n".join(f'<a href="{tag}{v}/">{tag}{v}</a>' for v in versions)
    return f"<!DOCTYPE html>\n<html><body>\n{links}\n</body></html>\n"


def sums_name(tool: str, version: str) -> str:
    """The SHA256SUMS file of a release, as its upstream names it."""
    return "SHA256SUMS" if tool == "terragrunt" else f"{'tofu' if tool == 'opentofu' else tool}_{version}_SHA256SUMS"


def media_type(tool: str) -> str:
    """What `archive` streams: a zip, but Terragrunt's bare binary."""
    return "application/octet-stream" if tool == "terragrunt" else "application/zip"


class ToolCache:
    def __init__(self, storage: Storage, upstream: Upstream, terraform_url: str, opentofu_url: str,
                 opentofu_index_url: str, index_ttl: float, *, terragrunt_url: str, terragrunt_index_url: str,
                 max_bytes: int = 0, now: Callable[[], float] = time.time) -> None:
        self.storage, self.upstream, self.index_ttl, self.now = storage, upstream, index_ttl, now
        self.max_bytes = max_bytes
        self._served: dict[str, float] = {}  # archive key → when this replica last recorded it served
        self.terraform_url, self.opentofu_url = terraform_url.rstrip("/"), opentofu_url.rstrip("/")
        self.opentofu_index_url = opentofu_index_url
        self.terragrunt_url, self.terragrunt_index_url = terragrunt_url.rstrip("/"), terragrunt_index_url
        self.flight = SingleFlight()

    def _tool(self, tool: str) -> str:
        if tool not in TOOLS:
            raise NotFound(f"tool {tool!r} is not one of {', '.join(TOOLS)}")
        return tool

    async def versions(self, tool: str) -> list[str]:
        """Released versions, newest first."""
        key = f"tools/{self._tool(tool)}/index.json"
        held = await read_json(self.storage, key)
        if held is not None and self.now() - float(held.get("fetched", 0)) < self.index_ttl:
            REQUESTS.labels("tool", "hit").inc()
            return list(held["versions"])

        async def refresh() -> list[str]:
            found = await self._upstream_versions(tool)
            await write_json(self.storage, key, {"fetched": self.now(), "versions": found})
            return found

        try:
            found = await self.flight.run(key, refresh)
        except UpstreamError as exc:
            REQUESTS.labels("tool", "error").inc()
            if held is not None:
                return list(held["versions"])
            raise Refused(str(exc)) from None
        REQUESTS.labels("tool", "refresh" if held is not None else "miss").inc()
        return found

    async def _upstream_versions(self, tool: str) -> list[str]:
        if tool == "terraform":
            document = await self.upstream.document(f"{self.terraform_url}/terraform/index.json")
            names = list((document.get("versions") or {}) if isinstance(document, dict) else {})
        elif tool == "terragrunt":
            releases = await self.upstream.document(self.terragrunt_index_url)
            tags = [r.get("tag_name") for r in releases if isinstance(r, dict)] if isinstance(releases, list) else []
            names = [t.removeprefix("v") for t in tags if isinstance(t, str)]
        else:
            document = await self.upstream.document(self.opentofu_index_url)
            entries = document.get("versions") if isinstance(document, dict) else None
            names = [e.get("id") for e in entries or () if isinstance(e, dict)]
        versions = []
        for name in names:
            if isinstance(name, str) and STRICT_VERSION.fullmatch(name):
                try:
                    versions.append(Version.parse(name))
                except InvalidVersionConstraint:
                    continue
        return [str(v) for v in sorted(versions, reverse=True)]

    def _urls(self, tool: str, version: str, platform: str) -> tuple[str, str, str]:
        """(archive file name, its URL, the SHA256SUMS URL)."""
        if tool == "terragrunt":  # released as a bare binary, one SHA256SUMS for the release
            base, name = f"{self.terragrunt_url}/v{version}", f"terragrunt_{platform}"
            return name, f"{base}/{name}", f"{base}/SHA256SUMS"
        if tool == "terraform":
            base, stem = f"{self.terraform_url}/terraform/{version}", f"terraform_{version}"
        else:
            base, stem = f"{self.opentofu_url}/v{version}", f"tofu_{version}"
        name = f"{stem}_{platform}.zip"
        return name, f"{base}/{name}", f"{base}/{stem}_SHA256SUMS"

    async def archive(self, tool: str, version: str, platform: str) -> tuple[str, AsyncIterator[bytes | memoryview]]:
        """(SHA-256, bytes) of the release archive, read through on first request."""
        self._tool(tool)
        if not STRICT_VERSION.fullmatch(version) or not PLATFORM.fullmatch(platform):
            raise NotFound(f"no {tool} {version} for {platform}")
        name, url, sums_url = self._urls(tool, version, platform)
        key = f"tools/{tool}/{version}/{name}"
        sha = await self._sha(key)
        if sha is None:
            try:
                sha = await self.flight.run(key, lambda: self._fetch(key, url, sums_url, name))
            except (UpstreamError, ShasumsError) as exc:
                REQUESTS.labels("tool", "error").inc()
                raise Refused(f"{tool} {version} {platform}: {exc}") from None
            REQUESTS.labels("tool", "miss").inc()
        else:
            REQUESTS.labels("tool", "hit").inc()
            await self._mark_served(key)
        stream = await self.storage.open(key)
        if stream is None:
            raise Refused(f"{tool} {version} {platform}: the archive vanished")
        return sha, _counted(stream)

    def platform_of(self, tool: str, version: str, name: str) -> str | None:
        """The platform whose release archive is called `name`, if any a runner can run."""
        return next((platform for platform in RUNNER_PLATFORMS if self._urls(tool, version, platform)[0] == name),
                    None)

    async def stored_sums(self, tool: str, version: str) -> str:
        """A SHA256SUMS (sha256sum's format) of the archives of `tool` `version` held now, each digest the one
        checked against upstream's SHA256SUMS when it was stored: tenv fetches the archive first, then this."""
        self._tool(tool)
        lines = []
        for platform in RUNNER_PLATFORMS:
            name = self._urls(tool, version, platform)[0]
            sha = await self._sha(f"tools/{tool}/{version}/{name}")
            if sha is not None:
                lines.append(f"{sha}  {name}\n")
        if not lines:
            raise NotFound(f"no {tool} {version} archive is held: fetch one first")
        return "".join(lines)

    async def _sha(self, key: str) -> str | None:
        stream = await self.storage.open(f"{key}.sha256")
        if stream is None:
            return None
        return b"".join([chunk async for chunk in stream]).decode().strip() or None

    async def _fetch(self, key: str, url: str, sums_url: str, name: str) -> str:
        sums = parse_shasums((await self.upstream.fetch(sums_url, MAX_DOCUMENT)).decode(errors="replace"))
        expected = sums.get(name)
        if expected is None:
            raise UpstreamError(f"{sums_url} lists no {name}")
        with tempfile.TemporaryDirectory(prefix="burrito-py-tool-") as tmp:
            path = Path(tmp) / name
            await self.upstream.fetch_to(url, path, MAX_ARCHIVE)
            actual = await asyncio.to_thread(file_sha256, path)
            if actual != expected:
                raise UpstreamError(f"{name}: checksum did not match: its SHA-256 {actual} is not the {expected} "
                                    "of its SHA256SUMS; not stored")
            await self.storage.put(key, _file_chunks(path), MAX_ARCHIVE)

        async def digest() -> AsyncIterator[bytes]:
            yield expected.encode()

        await self.storage.put(f"{key}.sha256", digest(), 128)  # after the archive: a digest names a stored file
        OBJECTS.inc()
        await self._mark_served(key, force=True)
        if self.max_bytes:
            await self.evict(keep=key)
        return expected

    async def _mark_served(self, key: str, force: bool = False) -> None:
        """Record when `key` was served, coarsely (at most every LAST_USED_EVERY per replica): a hit costs no
        write each time."""
        now = self.now()
        if not force and now - self._served.get(key, float("-inf")) <= LAST_USED_EVERY:
            return
        if len(self._served) >= 10_000:  # bounded: forgetting only costs one more write
            self._served.clear()
        self._served[key] = now
        await write_json(self.storage, f"{key}.served", {"lastUsed": now})

    async def evict(self, keep: str | None = None) -> list[str]:
        """Least recently served archives first (never recorded: oldest), until the stored archives fit
        `max_bytes`; never `keep`, the archive being stored now. Returns the archive keys evicted."""
        sizes = await self.storage.sizes("tools")
        archives = {k: n for k, n in sizes.items() if f"{k}.sha256" in sizes}
        total = sum(archives.values())
        if total <= self.max_bytes:
            return []

        async def last_used(key: str) -> float:
            record = await read_json(self.storage, f"{key}.served") if f"{key}.served" in sizes else None
            return float(record.get("lastUsed", 0)) if isinstance(record, dict) else 0.0

        order = sorted([(await last_used(k), k) for k in archives if k != keep])
        evicted = []
        for _, key in order:
            if total <= self.max_bytes:
                break
            # The digest first: a request meanwhile finds no digest and reads the archive through again.
            await self.storage.delete(f"{key}.sha256")
            await self.storage.delete_many([key, f"{key}.served"])
            self._served.pop(key, None)
            OBJECTS.dec()
            total -= archives[key]
            evicted.append(key)
            log.info("tool cache: evicted %s", key)
        return evicted

