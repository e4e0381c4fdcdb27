"""Helpers for tests that run against the API emulator (importable from any test package)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from burrito_py.local.apiserver import ApiServer

T = TypeVar("T")


@contextmanager
def running_apiserver(tmp_path: Path | None = None, kubeconfig: Path | None = None) -> Iterator[ApiServer]:
    """A fresh emulator on a free port; pod logs under `tmp_path/pod-logs`; optional kubeconfig written."""
    server = ApiServer(pod_log_dir=tmp_path / "pod-logs" if tmp_path is not None else None)
    server.start()
    try:
        if kubeconfig is not None:
            server.write_kubeconfig(kubeconfig)
        yield server
    finally:
        server.stop()


def wait_for(predicate: Callable[[], T], timeout: float = 5.0, interval: float = 0.005, what: str = "") -> T:
    """Poll until `predicate()` is truthy and return its value; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate!r}")
        time.sleep(interval)


def watching(server: ApiServer, path_part: str) -> bool:
    """Has anyone opened a watch on a path containing `path_part` (e.g. an operator that is ready)?"""
    return any(r.query.get("watch") in ("true", "1", "True") and path_part in r.path for r in list(server.requests))
