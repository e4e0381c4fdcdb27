"""Helpers for tests that run against the API emulator (importable from any test package)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from burrito_local.apiserver import ApiServer

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


@dataclass
class LocalCluster:
    api: ApiServer
    kubeconfig: Path
    kubelet: Any  # LocalKubelet (imported lazily: tests of the API alone do not need it)
    controller_manager: Any  # ControllerManager


@contextmanager
def running_cluster(workdir: Path, kubeconfig: Path | None = None, **kubelet_options: Any) -> Iterator[LocalCluster]:
    """Emulator + controller manager + kubelet, as a one-node cluster: pod logs under `workdir/pod-logs`,
    pods under `workdir/pods`, the admin kubeconfig at `kubeconfig` (default `workdir/kubeconfig`).
    `kubelet_options` go to LocalKubelet (e.g. grace_seconds, backoff_base, refresh_delay)."""
    from burrito_local.controller_manager import ControllerManager
    from burrito_local.kubelet import LocalKubelet

    with ExitStack() as stack:
        api = ApiServer(pod_log_dir=workdir / "pod-logs").start()
        stack.callback(api.stop)
        path = api.write_kubeconfig(kubeconfig or workdir / "kubeconfig")
        manager = ControllerManager(path)
        manager.start()
        stack.callback(manager.stop)
        kubelet = LocalKubelet(path, workdir / "pod-logs", workdir / "pods", **kubelet_options)
        kubelet.start()
        stack.callback(kubelet.stop)
        yield LocalCluster(api, path, kubelet, manager)


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
