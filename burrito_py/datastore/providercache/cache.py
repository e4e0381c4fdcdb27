"""The read-through provider cache behind the network mirror routes (docs/architecture.md §10.5).

Storage keys (the datastore's backend, so its encryption applies; retention never touches keys it does not know):

- `providers/archives/<sha256>.zip`: archives, content-addressed;
- `providers/by-sha/<sha256>/<file>.json`: where an archive comes from (address, version, platform, file name: the
  first listing's, written once), its size, `h1` once stored, and when it was last served (written at most
  hourly); one per file name, since two platforms (or versions) may publish the very same archive;
- `providers/origins/<sha256>/<digest of the origin>.json`: every (address, version, platform, file name) whose
  `SHA256SUMS` listed the archive, each written once: anyone may publish a provider listing another's archive, so
  no single listing may decide where it is read from;
- `providers/meta/<hostname>/<namespace>/<type>/index.json`: the upstream version list, with when it was read;
- `providers/meta/<hostname>/<namespace>/<type>/<version>.json`: every platform's file and SHA-256, from the
  upstream `SHA256SUMS` (its signature checked when the registry signs).

Freshness: a cached index is read again after `index_ttl`, and at once when it lacks a version asked for
(`<version>.json`) or a version some lock file pins (Terraform chooses from `index.json`, so this is how a
version published after the index was cached is served on the first request: burrito #642). An upstream that
fails while a stale index is held: the stale index is served.

Integrity: an archive is stored only when its SHA-256 equals the registry's `shasum` and the `SHA256SUMS` entry;
anything else is refused and never stored or served; a read through tries each origin until one's bytes verify.
Archives are served only by the digest a version document named, and only through a URL that document signed
(`signing.py`, checked by the route).

Single-flight: concurrent requests for one index, version or archive share one upstream read (per replica).
Eviction (`max_bytes`): least recently served archives first, those a lock file pins (`pinned` is given by the
caller: the versions named in the repositories' `.terraform.lock.hcl` files) only after every other one; the bound
holds even when pins alone exceed it (tenants write lock files).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import tempfile
import time
import zipfile
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from burrito_py.datastore.providercache.hashes import ShasumsError, file_sha256, parse_shasums, zip_h1
from burrito_py.datastore.providercache.metrics import OBJECTS, REQUESTS, SERVED_BYTES
from burrito_py.datastore.providercache.signatures import SignatureError, verify_detached
from burrito_py.datastore.providercache.upstream import Upstream, UpstreamError
from burrito_py.datastore.storage import Exists, Storage

__all__ = ["NotFound", "ProviderAddress", "ProviderCache", "Refused", "SingleFlight", "read_json", "write_json"]

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_ARCHIVE = 2 * 1024 * 1024 * 1024
MAX_JSON = 64 * 1024 * 1024
LAST_USED_EVERY = 3600.0
HOSTNAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?(:[0-9]{1,5})?$")
NAME = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$")
VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
FILENAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,200}\.zip$")
PREFERRED_PLATFORM = "linux_amd64"
MEMO_ENTRIES = 10_000
H1_RECHECK = 60.0
SERVED_CHUNK = 64 * 1024  # archive bytes handed to the HTTP(S) response in pieces this size, see _counted


class NotFound(Exception):
    """Nothing of that name (404)."""


class Refused(Exception):
    """Upstream failed or gave something that does not verify (502); the message says which."""


@dataclass(frozen=True, slots=True)
class ProviderAddress:
    hostname: str
    namespace: str
    type: str

    @classmethod
    def parse(cls, hostname: str, namespace: str, type_: str) -> ProviderAddress:
        address = cls(hostname.lower(), namespace.lower(), type_.lower())
        if not HOSTNAME.fullmatch(address.hostname):
            raise NotFound(f"hostname {hostname!r} is not a registry host name")
        for what, value in (("namespace", address.namespace), ("type", address.type)):
            if not NAME.fullmatch(value):
                raise NotFound(f"{what} {value!r} is not a provider {what}")
        return address

    def __str__(self) -> str:
        return f"{self.hostname}/{self.namespace}/{self.type}"


class SingleFlight:
    """Concurrent callers of one key share one call."""

    def __init__(self) -> None:
        self._running: dict[str, asyncio.Future[Any]] = {}

    async def run(self, key: str, call: Callable[[], Awaitable[T]]) -> T:
        running = self._running.get(key)
        if running is not None:
            result: T = await asyncio.shield(running)
            return result
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._running[key] = future
        try:
            value = await call()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody else waited
            raise
        else:
            future.set_result(value)
            return value
        finally:
            del self._running[key]


async def read_json(storage: Storage, key: str) -> Any:
    stream = await storage.open(key)
    if stream is None:
        return None
    return json.loads(b"".join([chunk async for chunk in stream]))


async def write_json(storage: Storage, key: str, value: Any, *, once: bool = False) -> None:
    data = json.dumps(value, sort_keys=True).encode()

    async def chunks() -> AsyncIterator[bytes]:
        yield data

    await storage.put(key, chunks(), MAX_JSON, once=once)


async def _file_chunks(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as handle:
        while chunk := await asyncio.to_thread(handle.read, 1 << 20):
            yield chunk


class ProviderCache:
    def __init__(self, storage: Storage, upstream: Upstream, registries: Collection[str], index_ttl: float,
                 max_bytes: int = 0, pinned: Callable[[], Awaitable[set[tuple[str, str]]]] | None = None,
                 now: Callable[[], float] = time.time) -> None:
        self.storage, self.upstream, self.index_ttl, self.max_bytes = storage, upstream, index_ttl, max_bytes
        self.registries = {r.lower() for r in registries}
        self.pinned, self.now = pinned, now
        self.flight = SingleFlight()
        # Documents kept in memory (docs/architecture.md §10.5): version documents and archive pointers do not
        # change once written (a pointer gains `h1` once, then only `lastUsed`), an index is kept with its
        # `fetched` stamp and read from storage again once it is not fresh. Each storage read is several thread
        # hops; a warm `init` asks for two documents and one archive per provider.
        self._memo: dict[str, dict[str, Any]] = {}
        self._h1_checked: dict[str, float] = {}

    def _remember(self, key: str, value: dict[str, Any]) -> None:
        if len(self._memo) >= MEMO_ENTRIES and key not in self._memo:
            self._memo.clear()  # bounded: many providers evict everything, read again on demand
            self._h1_checked.clear()
        self._memo[key] = value

    async def _read_memo(self, key: str) -> dict[str, Any] | None:
        held = self._memo.get(key)
        if held is None:
            held = await read_json(self.storage, key)
            if held is not None:
                self._remember(key, held)
        return held

    async def _write_memo(self, key: str, value: dict[str, Any]) -> None:
        await write_json(self.storage, key, value)
        self._remember(key, value)

    def _meta(self, address: ProviderAddress) -> str:
        return f"providers/meta/{address}"

    def _allowed(self, address: ProviderAddress) -> None:
        if address.hostname not in self.registries:
            raise NotFound(f"registry {address.hostname} is not one this mirror reads through "
                           f"({', '.join(sorted(self.registries))})")

    # -- index.json ---------------------------------------------------------------------------------------------
    async def index(self, address: ProviderAddress, want: str | None = None) -> dict[str, Any]:
        """The cached index, read again when stale, or when it lacks `want`."""
        self._allowed(address)
        key = f"{self._meta(address)}/index.json"
        held = self._memo.get(key)
        if held is None or not await self._fresh(held, address, want):
            held = await read_json(self.storage, key)  # another replica may have read it again meanwhile
            if held is not None:
                self._remember(key, held)
        if held is not None and await self._fresh(held, address, want):
            REQUESTS.labels("index", "hit").inc()
            return dict(held)

        async def refresh() -> dict[str, Any]:
            versions = await self.upstream.versions(address.hostname, address.namespace, address.type)
            document = {"fetched": self.now(), "versions": {v: {"platforms": p} for v, p in versions.items()}}
            await self._write_memo(key, document)
            return document

        try:
            document = await self.flight.run(key, refresh)
        except UpstreamError as exc:
            REQUESTS.labels("index", "error").inc()
            if held is not None:  # upstream down: what we know beats nothing
                log.warning("provider index %s: upstream failed, serving the cached one: %s", address, exc)
                return dict(held)
            raise Refused(str(exc)) from None
        REQUESTS.labels("index", "refresh" if held is not None else "miss").inc()
        return document

    async def _fresh(self, held: dict[str, Any], address: ProviderAddress, want: str | None) -> bool:
        """Whether a held index answers without reading upstream: within its TTL, holding `want`, and (asked for
        the index itself) every version a lock file pins."""
        if self.now() - float(held.get("fetched", 0)) >= self.index_ttl:
            return False
        if want is not None:
            return want in held["versions"]
        if self.pinned is not None:
            # Terraform picks versions from index.json: a version a lock file pins but the cached index lacks
            # (published since) must make the index fresh now, not after the TTL (burrito #642).
            wanted = {v for a, v in await self.pinned() if a == str(address)}
            return wanted <= set(held["versions"])
        return True

    # -- <version>.json -----------------------------------------------------------------------------------------
    async def version(self, address: ProviderAddress, version: str) -> dict[str, Any]:
        """The version's document: every platform's archive file and SHA-256 (and `h1` once stored)."""
        if not VERSION.fullmatch(version):
            raise NotFound(f"version {version!r} is not a version")
        index = await self.index(address, want=version)
        if version not in index["versions"]:
            REQUESTS.labels("version", "error").inc()
            raise NotFound(f"{address} has no version {version}")
        key = f"{self._meta(address)}/{version}.json"
        held = await self._read_memo(key)  # written once, never changed
        if held is not None:
            REQUESTS.labels("version", "hit").inc()
            return dict(held)
        platforms = list(index["versions"][version].get("platforms") or [])
        try:
            document = await self.flight.run(key, lambda: self._read_version(address, version, platforms, key))
        except (UpstreamError, ShasumsError, SignatureError) as exc:
            REQUESTS.labels("version", "error").inc()
            raise Refused(f"{address} {version}: {exc}") from None
        REQUESTS.labels("version", "miss").inc()
        return document

    async def _read_version(self, address: ProviderAddress, version: str, platforms: list[str], key: str
                            ) -> dict[str, Any]:
        if not platforms:
            raise UpstreamError(f"{address} {version} lists no platform")
        first = PREFERRED_PLATFORM if PREFERRED_PLATFORM in platforms else platforms[0]
        info = await self.upstream.download(address.hostname, address.namespace, address.type, version, first)
        shasums = await self.upstream.fetch(info["shasums_url"], MAX_JSON)
        signature_url = info.get("shasums_signature_url")
        verified = "sha256sums"
        if isinstance(signature_url, str) and signature_url:
            signature = await self.upstream.fetch(signature_url, MAX_JSON)
            keys = [k.get("ascii_armor", "") for k in ((info.get("signing_keys") or {}).get("gpg_public_keys") or ())
                    if isinstance(k, dict)]
            await asyncio.to_thread(verify_detached, shasums, signature, keys)
            verified = "signature"
        sums = parse_shasums(shasums.decode(errors="replace"))
        if sums.get(info["filename"]) != info["shasum"]:
            raise UpstreamError(f"{info['filename']}: the registry's shasum is not the one in SHA256SUMS")
        files: dict[str, dict[str, str]] = {}
        # This provider's own archives only (a SHA256SUMS may list anything: its publisher signs it): named as the
        # registry names the platform it was asked about (a private registry may not use `terraform-provider-`),
        # the other platforms alike.
        suffix = f"_{version}_{first}.zip"
        prefix = str(info["filename"])[:-len(suffix)] if str(info["filename"]).endswith(suffix) else \
            f"terraform-provider-{address.type}"
        for platform in platforms:
            name = info["filename"] if platform == first else f"{prefix}_{version}_{platform}.zip"
            if name in sums and FILENAME.fullmatch(name):
                files[platform] = {"filename": name, "sha256": sums[name]}
                origin = {"hostname": address.hostname, "namespace": address.namespace, "type": address.type,
                          "version": version, "platform": platform, "filename": name}
                # Another provider (`evil/aws`) may list the very same file and digest: every listing is an origin
                # of its own, and the pointer, with the h1, size and lastUsed a read through adds, is never replaced.
                await write_json(self.storage, _origin_key(sums[name], origin), origin, once=True)
                with contextlib.suppress(Exists):
                    await write_json(self.storage, _pointer(sums[name], name), origin, once=True)
        document = {"platforms": files, "verified": verified}
        await self._write_memo(key, document)
        return document

    @staticmethod
    def mirror_document(document: dict[str, Any], hashes: dict[str, str],
                        sign: Callable[[str, str], str] | None = None) -> dict[str, Any]:
        """The protocol's `<version>.json`: archive URLs relative to it (`<base><host>/<ns>/<type>/<v>.json` →
        `<base>archives/<sha>/<file>`, with `?<sign(sha, file)>`: the archive route serves signed URLs only,
        `signing.py`), `zh:` always, `h1:` where known (`hashes`: sha256 → h1)."""
        archives = {}
        for platform, entry in sorted(document["platforms"].items()):
            sha = entry["sha256"]
            query = f"?{sign(sha, entry['filename'])}" if sign is not None else ""
            archives[platform] = {"url": f"../../../archives/{sha}/{entry['filename']}{query}",
                                  "hashes": [f"zh:{sha}", *([hashes[sha]] if sha in hashes else [])]}
        return {"archives": archives}

    async def known_h1(self, document: dict[str, Any]) -> dict[str, str]:
        found = {}
        for entry in document["platforms"].values():
            key = _pointer(entry["sha256"], entry["filename"])
            pointer = self._memo.get(key)
            # h1 is the content's: once known it never changes. Unknown (an archive no one fetched yet, as most
            # platforms'), the pointer is read again at most every H1_RECHECK seconds, for an h1 another
            # replica learnt; this replica's own fetches update the memo at once.
            if pointer is None or (not pointer.get("h1")
                                   and self.now() - self._h1_checked.get(key, -H1_RECHECK) >= H1_RECHECK):
                pointer = await read_json(self.storage, key)
                self._h1_checked[key] = self.now()
                if pointer is not None:
                    self._remember(key, pointer)
            if pointer and pointer.get("h1"):
                found[entry["sha256"]] = pointer["h1"]
        return found

    async def stored_pointer(self, sha256: str, filename: str) -> dict[str, Any]:
        """A stored archive's pointer (`h1`, `size`): after `archive`, which leaves this replica's own read through
        in memory; one this replica holds without `h1` (another stored the archive) is read from storage again."""
        key = _pointer(sha256, filename)
        pointer = await self._read_memo(key) or {}
        if not pointer.get("h1"):
            pointer = await read_json(self.storage, key) or pointer
            if pointer.get("h1"):
                self._remember(key, pointer)
        return dict(pointer)

    # -- archives -----------------------------------------------------------------------------------------------
    async def archive(self, sha256: str, filename: str, piece: int = SERVED_CHUNK
                      ) -> AsyncIterator[bytes | memoryview]:
        """The archive's bytes, in `piece`s (`_counted`); read through (and verified) on first request."""
        if not SHA256.fullmatch(sha256) or not FILENAME.fullmatch(filename):
            raise NotFound("not an archive of this mirror")
        pointer = await self._read_memo(_pointer(sha256, filename))  # pointers are never deleted
        if pointer is None:
            raise NotFound(f"no archive {sha256}/{filename} was ever listed by this mirror")
        key = f"providers/archives/{sha256}.zip"
        stream = await self.storage.open(key)
        if stream is not None:
            REQUESTS.labels("archive", "hit").inc()
            if self.now() - float(pointer.get("lastUsed", 0)) > LAST_USED_EVERY:  # for eviction, coarsely
                # From storage, not memory: another replica may have stored the archive's h1 and size since.
                current = await read_json(self.storage, _pointer(sha256, filename)) or pointer
                await self._write_memo(_pointer(sha256, filename), {**current, "lastUsed": self.now()})
        else:
            try:
                await self.flight.run(key, lambda: self._fetch_archive(sha256, pointer, key))
            except (UpstreamError, Refused) as exc:
                REQUESTS.labels("archive", "error").inc()
                raise Refused(str(exc)) from None
            REQUESTS.labels("archive", "miss").inc()
            stream = await self.storage.open(key)
            if stream is None:
                raise Refused(f"archive {sha256} vanished right after it was stored")
        return _counted(stream, piece)

    async def _origins(self, sha256: str, pointer: dict[str, Any]) -> list[dict[str, Any]]:
        """Every listing that named this digest: the pointer's (the first; the only one of a pointer written before
        origin records were), then the origin records."""
        found = [{k: pointer[k] for k in ORIGIN_FIELDS}]
        for key in await self.storage.list(f"providers/origins/{sha256}"):
            record = await read_json(self.storage, key)
            if record is not None and record not in found:
                found.append(record)
        return found

    async def _fetch_archive(self, sha256: str, pointer: dict[str, Any], key: str) -> None:
        # Any origin may be a stranger's provider listing this digest (its download failing, or naming other
        # bytes): each is tried in turn, and the digest check decides which bytes are stored.
        failures = []
        for origin in await self._origins(sha256, pointer):
            try:
                size, h1 = await self._fetch_from(sha256, origin, key)
            except (UpstreamError, Refused) as exc:
                log.warning("provider cache: archive %s not read from this origin: %s", sha256, exc)
                failures.append(str(exc))
                continue
            break
        else:
            # The first origin's reason (the platform asked, as a rule), bounded: the runner shows it as its error.
            more = f" ({len(failures) - 1} more origin(s) of this archive failed too)" if len(failures) > 1 else ""
            raise Refused(failures[0] + more)
        OBJECTS.inc()
        for key in await self.storage.list(f"providers/by-sha/{sha256}"):  # every file name of this content
            other = await read_json(self.storage, key)
            if other is not None:
                await self._write_memo(key, {**other, "h1": h1, "size": size, "lastUsed": self.now()})
        log.info("provider cache: stored %s %s %s (%d bytes)", _address(origin), origin["version"], origin["platform"],
                 size)
        if self.max_bytes:
            await self.evict(keep=sha256)

    async def _fetch_from(self, sha256: str, origin: dict[str, Any], key: str) -> tuple[int, str]:
        """Reads the archive through from one origin and stores it once its bytes verify: (size, h1)."""
        address = _address(origin)
        info = await self.upstream.download(address.hostname, address.namespace, address.type, origin["version"],
                                            origin["platform"])
        if info["shasum"] != sha256 or info["filename"] != origin["filename"]:
            raise Refused(f"{address} {origin['version']} {origin['platform']}: the registry now names "
                          f"{info['filename']} {info['shasum']}, not {origin['filename']} {sha256}")
        with tempfile.TemporaryDirectory(prefix="burrito-py-provider-") as tmp:
            path = Path(tmp) / origin["filename"]
            size = await self.upstream.fetch_to(info["download_url"], path, MAX_ARCHIVE)
            actual = await asyncio.to_thread(file_sha256, path)
            if actual != sha256:
                raise Refused(f"{address} {origin['version']} {origin['filename']}: checksum did not match: its "
                              f"SHA-256 {actual} is not the {sha256} of SHA256SUMS; not stored")
            try:
                h1 = await asyncio.to_thread(zip_h1, path)
            except (ValueError, zipfile.BadZipFile, EOFError) as exc:  # ArchiveRefused is a ValueError
                raise Refused(f"{address} {origin['version']} {origin['filename']}: refused, not stored: {exc}"
                              ) from None
            await self.storage.put(key, _file_chunks(path), MAX_ARCHIVE)
        return size, h1

    async def evict(self, keep: str | None = None) -> list[str]:
        """Least recently served archives first, until the archives fit `max_bytes`; one a lock file pins (by
        provider address and version, under any of its file names) only once no other is left; never `keep`.
        Returns the digests evicted."""
        by_sha: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for key in await self.storage.list("providers/by-sha"):
            pointer = await read_json(self.storage, key)
            if pointer and pointer.get("size"):
                by_sha.setdefault(key.split("/")[2], []).append((key, pointer))
        stored = {sha: entries for sha, entries in by_sha.items()
                  if await self.storage.exists(f"providers/archives/{sha}.zip")}
        total = sum(int(entries[0][1]["size"]) for entries in stored.values())
        if total <= self.max_bytes:
            return []
        pins = await self.pinned() if self.pinned is not None else set()
        # A pointer names the first listing only: a pin on any provider that listed the archive holds it.
        listed: dict[str, set[tuple[str, str]]] = {}
        for key in await self.storage.list("providers/origins"):
            if key.split("/")[2] in stored and (record := await read_json(self.storage, key)) is not None:
                listed.setdefault(key.split("/")[2], set()).add((str(_address(record)), record["version"]))

        def last_used(sha: str) -> tuple[float, str]:
            return max(float(p.get("lastUsed", 0)) for _, p in stored[sha]), sha

        def origins(sha: str) -> set[tuple[str, str]]:
            return {(str(_address(p)), p["version"]) for _, p in stored[sha]} | listed.get(sha, set())

        # Pinned archives go last, but they do go: tenants write the lock files, and pins that could hold the
        # cache above its bound would let any of them fill the volume every tenant's plans and state live on.
        order = sorted(stored, key=lambda sha: (bool(origins(sha) & pins), last_used(sha)))
        evicted = []
        for sha in order:
            if total <= self.max_bytes:
                break
            if sha == keep:
                continue
            await self.storage.delete(f"providers/archives/{sha}.zip")
            for key, pointer in stored[sha]:
                await self._write_memo(key, {k: v for k, v in pointer.items() if k not in ("h1", "size")})
            OBJECTS.dec()
            total -= int(stored[sha][0][1]["size"])
            evicted.append(sha)
            names = ", ".join(f"{a} {v}" for a, v in sorted(origins(sha)))
            if origins(sha) & pins:
                log.warning("provider cache: evicted %s, which a lock file pins: the pinned versions alone exceed "
                            "the bound (providerCache.maxSize)", names)
            else:
                log.info("provider cache: evicted %s", names)
        return evicted


ORIGIN_FIELDS = ("hostname", "namespace", "type", "version", "platform", "filename")


def _pointer(sha256: str, filename: str) -> str:
    return f"providers/by-sha/{sha256}/{filename}.json"


def _origin_key(sha256: str, origin: dict[str, str]) -> str:
    # Named by a digest of the origin: one key per origin whatever its characters, rewritten only with itself.
    return f"providers/origins/{sha256}/{hashlib.sha256(json.dumps(origin, sort_keys=True).encode()).hexdigest()}.json"


def _address(origin: dict[str, Any]) -> ProviderAddress:
    return ProviderAddress(origin["hostname"], origin["namespace"], origin["type"])


async def _counted(stream: AsyncIterator[bytes], piece: int = SERVED_CHUNK) -> AsyncIterator[bytes | memoryview]:
    """The archive's bytes in `piece`s (views, no copies): the asyncio/uvloop TLS transport encrypts 1 MiB writes
    markedly slower than 64 KiB ones (8 MiB, fastest of 9: 0.09-0.11 s against 0.04-0.07 s), and archives are
    what a warm mirror spends its time on (docs/architecture.md §10.5). Plain HTTP wants them whole (fewer
    writes, fewer loop turns): `piece` 0."""
    async for chunk in stream:
        SERVED_BYTES.inc(len(chunk))
        if not piece:
            yield chunk
            continue
        view = memoryview(chunk)
        for start in range(0, len(view), piece):
            yield view[start:start + piece]
