"""Signed archive URLs of the provider mirror (docs/architecture.md §10.5).

Terraform sends no credentials when it downloads a provider archive, so the archive route cannot ask for a token.
Instead the version documents, which need one, hand out archive URLs carrying an expiry and an HMAC-SHA256 over
`<sha256>/<file>/<expiry>`: `../../../archives/<sha256>/<file>?exp=<unix seconds>&sig=<base64url>` (Terraform
resolves the relative URL against the document's and keeps its query string). The archive route serves only a URL
signed by this mirror and not expired, and answers anything else as it answers an archive it never heard of: one
404, before any storage read or upstream request. So an outsider can neither learn which digests the mirror knows
nor make it read any archive through.

The key: `key` when set (every replica must be given the same one); else derived from the HTTPS listener's private
key (`HMAC(key file bytes, label)`), which every replica mounts from the same Secret, and derived again when that
file changes (the last two keys are accepted, so a rotation does not break URLs just handed out); else a random
key per process (one replica only).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["ArchiveSigner", "UrlKeys"]

LABEL = b"burrito-py provider archive URLs v1"


class UrlKeys:
    """The keys that sign (the first) and verify archive URLs."""

    def __init__(self, key: bytes | None = None, derive_from: Path | None = None, check_every: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._fixed = key
        self._file, self._check_every, self._clock = derive_from, check_every, clock
        self._lock = threading.Lock()
        self._keys: list[bytes] = [key] if key else []
        self._stamp: tuple[int, int, int] | None = None
        self._checked = -check_every
        if not self._keys and derive_from is None:
            self._keys = [secrets.token_bytes(32)]

    def accepted(self) -> list[bytes]:
        """The keys URLs verify with, the one that signs first."""
        if self._fixed is not None or self._file is None:
            return self._keys
        with self._lock:
            now = self._clock()
            if now - self._checked >= self._check_every or not self._keys:
                self._checked = now
                with contextlib.suppress(OSError):  # a file being swapped: keep the keys we have, look again
                    stat = os.stat(self._file)
                    stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
                    if stamp != self._stamp:
                        derived = hmac.new(self._file.read_bytes(), LABEL, hashlib.sha256).digest()
                        if not self._keys or derived != self._keys[0]:
                            self._keys = [derived, *self._keys[:1]]
                        self._stamp = stamp
            if not self._keys:  # the file was never readable: do not sign with nothing
                self._keys = [secrets.token_bytes(32)]
            return self._keys


class ArchiveSigner:
    def __init__(self, keys: UrlKeys, ttl_seconds: float, clock: Callable[[], float] = time.time) -> None:
        self.url_keys, self.ttl, self.clock = keys, ttl_seconds, clock

    @staticmethod
    def _mac(key: bytes, sha256: str, filename: str, expiry: int) -> str:
        message = f"{sha256}/{filename}/{expiry}".encode()
        return base64.urlsafe_b64encode(hmac.new(key, message, hashlib.sha256).digest()).decode().rstrip("=")

    def query(self, sha256: str, filename: str) -> str:
        """`exp=…&sig=…` for the archive's URL."""
        expiry = int(self.clock() + self.ttl)
        return f"exp={expiry}&sig={self._mac(self.url_keys.accepted()[0], sha256, filename, expiry)}"

    def valid(self, sha256: str, filename: str, expiry: str | None, signature: str | None) -> bool:
        """Whether the URL was signed by this mirror and has not expired (constant-time comparison)."""
        if not expiry or not signature or not (expiry.isascii() and expiry.isdigit()) or len(expiry) > 12:
            return False
        when = int(expiry)
        matched = False
        for key in self.url_keys.accepted():
            matched |= hmac.compare_digest(self._mac(key, sha256, filename, when).encode(), signature.encode())
        return matched and self.clock() < when
