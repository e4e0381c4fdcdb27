"""A slow client for the slow-client tests of the datastore and the server (docs/architecture.md §10.7, §11.2)."""

from __future__ import annotations

import select
import socket
import time


def closed_within(sock: socket.socket, seconds: float, trickle: bytes = b"") -> float | None:
    """Seconds until the peer closes `sock` (EOF or reset), sending `trickle` a byte every 0.2 s meanwhile (what a
    slowloris does); None when it is still open after `seconds`. Whatever the peer sends is read and dropped."""
    started = time.monotonic()
    pending = bytearray(trickle)
    while (elapsed := time.monotonic() - started) < seconds:
        readable, _, _ = select.select([sock], [], [], 0.2)
        try:
            if readable and not sock.recv(65536):
                return elapsed
            if pending:
                sock.send(bytes(pending[:1]))
                del pending[:1]
        except (ConnectionResetError, BrokenPipeError):
            return elapsed
    return None
