"""Package hashes as Terraform writes them in lock files, and `SHA256SUMS` files (pure).

`zh:` is the SHA-256 of a provider's zip archive (hex); `h1:` is Go's `dirhash.Hash1` of the archive's content,
which is what Terraform computes for an installed package: for each file (sorted by name), a line `<sha256 hex>
  <name>\\n`, and the base64 SHA-256 of all those lines. A mirror that reports both gives lock files complete
entries whether Terraform checks the archive or the unpacked package.

An archive is anyone's: whoever publishes a provider on a registry the mirror reads through, fetched when any
runner asks. Before a member is read, `zip_h1` refuses a central directory above `MAX_DIRECTORY_BYTES` (the zip
reader holds one object per entry, so a 2 GiB archive of entries would be gigabytes of the datastore's memory),
more than `MAX_MEMBERS` members, two members of one name (the same member listed again and again is a bomb: 80
listings of 64 MiB are 5 GiB to inflate from 64 KiB) and more than `MAX_UNPACKED_BYTES` in all (the reader
inflates no member past the size its entry declares). A provider is a binary and a few documents.
"""

from __future__ import annotations

import base64
import hashlib
import re
import struct
import zipfile
from pathlib import Path

__all__ = ["ArchiveRefused", "ShasumsError", "file_sha256", "parse_shasums", "zip_h1"]

MAX_DIRECTORY_BYTES = 1024 * 1024
MAX_MEMBERS = 4096
MAX_UNPACKED_BYTES = 4 * 1024 * 1024 * 1024
_END = b"PK\x05\x06"
_END_SIZE = 22
_LOCATOR64, _END64 = b"PK\x06\x07", b"PK\x06\x06"

_LINE = re.compile(r"^([0-9a-f]{64}) [ *]?(\S+)$")


class ShasumsError(ValueError):
    """A `SHA256SUMS` file that cannot be read."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class ArchiveRefused(ValueError):
    """A zip archive outside the bounds a provider keeps (the module's docstring); the message names which."""


def directory_size(path: Path) -> int | None:
    """The central directory's size as the end record the zip reader uses says (the larger of the classic and the
    zip64 one), None without an end record. Found as `zipfile` finds it: at the very end when the archive has no
    comment, else the last one within the comment's reach."""
    with path.open("rb") as handle:
        length = handle.seek(0, 2)
        start = max(length - 0xFFFF - _END_SIZE, 0)
        handle.seek(start)
        tail = handle.read()
    at = len(tail) - _END_SIZE
    if not (at >= 0 and tail[at:at + 4] == _END and tail[-2:] == b"\x00\x00"):
        at = tail.rfind(_END)
        if at < 0 or len(tail) - at < _END_SIZE:
            return None
    size = int(struct.unpack_from("<I", tail, at + 12)[0])
    locator = at - 20
    if locator >= 56 and tail[locator:locator + 4] == _LOCATOR64 and tail[locator - 56:locator - 52] == _END64:
        size = max(size, int(struct.unpack_from("<Q", tail, locator - 56 + 40)[0]))
    elif locator >= 0 and tail[locator:locator + 4] == _LOCATOR64:
        raise ArchiveRefused(f"{path.name}: its zip64 end record is not where the zip reader looks for it")
    return size


def _bounded_members(path: Path, archive: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    members = archive.infolist()
    if len(members) > MAX_MEMBERS:
        raise ArchiveRefused(f"{path.name}: {len(members)} members, more than the {MAX_MEMBERS} a provider may have")
    names = [info.filename for info in members]
    if len(set(names)) != len(names):
        raise ArchiveRefused(f"{path.name}: a member name is listed more than once")
    total = sum(info.file_size for info in members)
    if total > MAX_UNPACKED_BYTES:
        raise ArchiveRefused(f"{path.name}: {total} bytes unpacked, more than the {MAX_UNPACKED_BYTES} a provider "
                             "may have")
    return members


def zip_h1(path: Path) -> str:
    """`h1:` of a zip archive's content (Go's `dirhash.HashZip` with `Hash1`). Raises ArchiveRefused for an archive
    outside a provider's bounds (the module's docstring), before any member is read."""
    size = directory_size(path)
    if size is not None and size > MAX_DIRECTORY_BYTES:
        raise ArchiveRefused(f"{path.name}: a central directory of {size} bytes, more than the "
                             f"{MAX_DIRECTORY_BYTES} a provider's needs")
    summary = hashlib.sha256()
    with zipfile.ZipFile(path) as archive:
        members = sorted(_bounded_members(path, archive), key=lambda info: info.filename.encode())
        for info in members:
            if "\n" in info.filename:
                raise ValueError(f"{path.name}: a file name holds a newline")
            content = hashlib.sha256()
            with archive.open(info) as member:
                while chunk := member.read(1 << 20):
                    content.update(chunk)
            summary.update(f"{content.hexdigest()}  {info.filename}\n".encode())
    return "h1:" + base64.b64encode(summary.digest()).decode()


def parse_shasums(text: str) -> dict[str, str]:
    """`SHA256SUMS` (`<hex>  <file>` per line) as file name → hex digest."""
    sums: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        found = _LINE.match(line.strip())
        if found is None:
            raise ShasumsError(f"line {number} is not '<sha256>  <file>': {line[:80]!r}")
        sums[found.group(2)] = found.group(1)
    return sums
