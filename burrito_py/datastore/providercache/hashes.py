"""Package hashes as Terraform writes them in lock files, and `SHA256SUMS` files (pure).

`zh:` is the SHA-256 of a provider's zip archive (hex); `h1:` is Go's `dirhash.Hash1` of the archive's content,
which is what Terraform computes for an installed package: for each file (sorted by name), a line `<sha256 hex>
  <name>\\n`, and the base64 SHA-256 of all those lines. A mirror that reports both gives lock files complete
entries whether Terraform checks the archive or the unpacked package.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from pathlib import Path

__all__ = ["ShasumsError", "file_sha256", "parse_shasums", "zip_h1"]

_LINE = re.compile(r"^([0-9a-f]{64}) [ *]?(\S+)$")


class ShasumsError(ValueError):
    """A `SHA256SUMS` file that cannot be read."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def zip_h1(path: Path) -> str:
    """`h1:` of a zip archive's content (Go's `dirhash.HashZip` with `Hash1`)."""
    summary = hashlib.sha256()
    with zipfile.ZipFile(path) as archive:
        names = sorted((info.filename for info in archive.infolist()), key=lambda name: name.encode())
        for name in names:
            if "\n" in name:
                raise ValueError(f"{path.name}: a file name holds a newline")
            content = hashlib.sha256()
            with archive.open(name) as member:
                while chunk := member.read(1 << 20):
                    content.update(chunk)
            summary.update(f"{content.hexdigest()}  {name}\n".encode())
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
