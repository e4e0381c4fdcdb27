"""The datastore's HTTPS listener, whose certificate is read again when its files change.

cert-manager renews a certificate into the same Secret and the kubelet swaps the mounted files; a listener that
read them once would serve an expired certificate until its pod restarts. Here each TLS handshake looks at the
files at most every `check_every` seconds (a `stat`), and when they changed it answers with a fresh context built
by uvicorn's own factory (so ALPN and the rest stay uvicorn's choice); connections already open keep theirs.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn

__all__ = ["ReloadingCertificate", "https_config"]

log = logging.getLogger(__name__)


class ReloadingCertificate:
    def __init__(self, cert: Path, key: Path, check_every: float = 10.0) -> None:
        self.cert, self.key, self.check_every = cert, key, check_every
        self._lock = threading.Lock()
        self._checked = 0.0
        self._seen: tuple[Any, ...] = ()
        self._fresh: ssl.SSLContext | None = None
        self._default: Callable[[], ssl.SSLContext] | None = None

    def _stamp(self) -> tuple[Any, ...]:
        stats = [os.stat(path) for path in (self.cert, self.key)]
        return tuple((s.st_ino, s.st_mtime_ns, s.st_size) for s in stats)

    def factory(self, _: uvicorn.Config, default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        """uvicorn's `ssl_context_factory`: the listening context, which switches each new connection to the
        newest certificate."""
        self._default, self._seen, self._checked = default, self._stamp(), time.monotonic()
        context = default()
        context.sni_callback = self._on_handshake
        return context

    def _on_handshake(self, connection: ssl.SSLObject, _name: str | None, _context: ssl.SSLContext) -> None:
        fresh = self._current()
        if fresh is not None:
            connection.context = fresh

    def _current(self) -> ssl.SSLContext | None:
        with self._lock:
            now = time.monotonic()
            if now - self._checked >= self.check_every and self._default is not None:
                self._checked = now
                try:
                    stamp = self._stamp()
                    if stamp != self._seen:
                        self._fresh, self._seen = self._default(), stamp
                        log.info("datastore: HTTPS certificate %s read again", self.cert)
                except (OSError, ssl.SSLError) as exc:  # half-written files: keep the last good one, look again
                    log.warning("datastore: cannot read the new HTTPS certificate yet: %s", exc)
            return self._fresh


def https_config(app: Any, host: str, port: int, cert: Path, key: Path, check_every: float = 10.0,
                 **options: Any) -> uvicorn.Config:
    reloading = ReloadingCertificate(cert, key, check_every)
    return uvicorn.Config(app, host=host, port=port, ssl_certfile=str(cert), ssl_keyfile=str(key),
                          ssl_context_factory=reloading.factory, **options)
