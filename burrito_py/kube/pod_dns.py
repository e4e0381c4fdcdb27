"""Cluster DNS for processes the local kubelet runs: when `BURRITO_LOCAL_HOSTS` names a hosts file (the
kubelet keeps one per namespace: `<svc>.<ns>.svc.cluster.local`, `<svc>.<ns>.svc`, `<svc>.<ns>`, and the bare
`<svc>` of the pod's own namespace, as the resolv.conf search list gives a pod), `socket.getaddrinfo`
answers those names from it and asks the real resolver for everything else. Without the variable nothing
changes (a real node has cluster DNS). Cheap on purpose: `install()` runs in every `burrito-py` start-up,
the runner's included, and imports nothing new."""

from __future__ import annotations

import os
import socket
from typing import Any

ENV = "BURRITO_LOCAL_HOSTS"


class HostsTable:
    """The hosts file's names, re-read when the file is replaced (the kubelet swaps it atomically)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._names: dict[str, list[str]] = {}

    def lookup(self, name: str) -> list[str]:
        try:
            info = os.stat(self.path)
            stamp = (info.st_ino, info.st_mtime_ns)
        except OSError:
            return []
        if stamp != self._stamp:
            names: dict[str, list[str]] = {}
            with open(self.path, encoding="utf-8") as handle:
                for line in handle:
                    fields = line.split("#", 1)[0].split()
                    for alias in fields[1:]:
                        names.setdefault(alias.lower(), []).append(fields[0])
            self._names, self._stamp = names, stamp
        return self._names.get(name.lower().rstrip("."), [])


_original: Any = None


def install(environ: Any = os.environ) -> bool:
    """Route `socket.getaddrinfo` through the kubelet's hosts file when there is one; True if installed."""
    global _original
    path = environ.get(ENV)
    if not path or _original is not None:
        return False
    table = HostsTable(path)
    original = socket.getaddrinfo
    _original = original

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode("ascii", "replace") if isinstance(host, bytes) else host  # httpclient asks in bytes
        addresses = table.lookup(name) if isinstance(name, str) and name else []
        if not addresses:
            return original(host, *args, **kwargs)
        return [entry for address in addresses for entry in original(address, *args, **kwargs)]

    socket.getaddrinfo = getaddrinfo
    return True


def uninstall() -> None:
    global _original
    if _original is not None:
        socket.getaddrinfo = _original
        _original = None
