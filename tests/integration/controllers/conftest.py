"""Fixtures of the controllers' integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier

from burrito_py.api.crdgen import generate_crds


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[ApiServer, Path]]:
    """The emulator with burrito-py's CRDs, and a kubeconfig for it."""
    server = ApiServer(pod_log_dir=tmp_path / "logs").start()
    applier = Applier(server.url)
    try:
        for crd in generate_crds().values():
            applier.apply(crd)
        yield server, server.write_kubeconfig(tmp_path / "kubeconfig")
    finally:
        applier.close()
        server.stop()
