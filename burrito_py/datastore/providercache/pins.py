"""Which provider versions the repositories' lock files pin: the versions the cache must never evict.

Read from the source archives the datastore already stores (`sources/<ns>/<repo>/<tree>.tar.gz`): every
`.terraform.lock.hcl` in them. Archives are content-addressed, so each is read once per process.
"""

from __future__ import annotations

import asyncio
import io
import logging
import re
import tarfile
import time

from burrito_py.datastore.storage import Storage

__all__ = ["LockPins", "lock_file_pins"]

log = logging.getLogger(__name__)
_PROVIDER = re.compile(r'provider\s+"([^"]+)"\s*\{(.*?)\n\}', re.S)
_VERSION = re.compile(r'^\s*version\s*=\s*"([^"]+)"', re.M)
MAX_SOURCE = 512 * 1024 * 1024
# A tenant writes the archive's content (it is their repository): a real lock file is a few KB, and a member
# named `.terraform.lock.hcl` of gigabytes (a few MB compressed) must not be read into the shared datastore's
# memory. Past MAX_SCANNED bytes of members the rest of an archive is not even decompressed.
MAX_LOCK_FILE = 1024 * 1024
MAX_SCANNED = 2 * 1024 * 1024 * 1024


def lock_file_pins(text: str) -> set[tuple[str, str]]:
    """(provider address, version) of every provider block of a `.terraform.lock.hcl`."""
    pins = set()
    for address, body in _PROVIDER.findall(text):
        found = _VERSION.search(body)
        if found is not None:
            pins.add((address.lower(), found.group(1)))
    return pins


def _archive_pins(data: bytes, key: str = "") -> set[tuple[str, str]]:
    pins: set[tuple[str, str]] = set()
    scanned = 0
    # A stream ("r|gz"): members are decompressed once, in order, and never all held.
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|gz") as archive:
        for member in archive:
            scanned += member.size
            if scanned > MAX_SCANNED:
                log.warning("provider cache: %s holds over %d bytes; lock files past that are not read", key,
                            MAX_SCANNED)
                break
            if not member.isfile() or member.name.rsplit("/", 1)[-1] != ".terraform.lock.hcl":
                continue
            if member.size > MAX_LOCK_FILE:
                log.warning("provider cache: %s: %r is %d bytes, over %d: not read as a lock file", key,
                            member.name, member.size, MAX_LOCK_FILE)
                continue
            handle = archive.extractfile(member)
            if handle is not None:
                pins |= lock_file_pins(handle.read(MAX_LOCK_FILE).decode(errors="replace"))
    return pins


class LockPins:
    """Callable: the pins of every stored source archive, listed again at most every `max_age` seconds (index
    requests ask for them)."""

    def __init__(self, storage: Storage, max_age: float = 5.0) -> None:
        self.storage, self.max_age = storage, max_age
        self._seen: dict[str, set[tuple[str, str]]] = {}
        self._last: tuple[float, set[tuple[str, str]]] | None = None

    async def __call__(self) -> set[tuple[str, str]]:
        if self._last is not None and time.monotonic() - self._last[0] < self.max_age:
            return self._last[1]
        pins = await self._read()
        self._last = (time.monotonic(), pins)
        return pins

    async def _read(self) -> set[tuple[str, str]]:
        pins: set[tuple[str, str]] = set()
        for key in await self.storage.list("sources"):
            if "/revisions/" in key or not key.endswith(".tar.gz"):
                continue
            if key not in self._seen:
                stream = await self.storage.open(key)
                if stream is None:
                    continue
                chunks, size = [], 0
                async for chunk in stream:
                    size += len(chunk)
                    if size > MAX_SOURCE:
                        break
                    chunks.append(chunk)
                try:
                    self._seen[key] = await asyncio.to_thread(_archive_pins, b"".join(chunks), key)
                except (tarfile.TarError, OSError, EOFError) as exc:
                    log.warning("provider cache: cannot read lock files of %s: %s", key, exc)
                    self._seen[key] = set()
            pins |= self._seen[key]
        return pins
