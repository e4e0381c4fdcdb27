"""Waiting for a freshly started HTTP service (datastore, server) to answer its `/healthz`."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx


def wait_healthy(url: str, alive: Callable[[], bool], timeout: float) -> bool:
    """Poll `url/healthz` until it answers 200 (True), or until `alive()` turns false or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        if not alive() or time.monotonic() > deadline:
            return False
        time.sleep(0.02)
