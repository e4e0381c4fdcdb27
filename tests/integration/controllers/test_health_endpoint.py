"""The controllers' liveness endpoint (kopf's), which the chart probes: served on --host/--health-port."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier

from burrito_py.api.crdgen import generate_crds
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.operator.main import ControllerThread, liveness_endpoint


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_liveness_endpoint_url() -> None:
    assert liveness_endpoint(ControllerSettings(health_port=0)) is None
    assert liveness_endpoint(ControllerSettings(host="10.1.2.3", health_port=8082)) == "http://10.1.2.3:8082/healthz"
    assert liveness_endpoint(ControllerSettings(host="fd00::1", health_port=8082)) == "http://[fd00::1]:8082/healthz"


def test_controllers_answer_healthz_on_their_host_and_port(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    with ApiServer(pod_log_dir=tmp_path / "pod-logs") as api:
        api.write_kubeconfig(kubeconfig)
        applier = Applier(api.url)
        for crd in generate_crds().values():
            applier.apply(crd)
        applier.close()
        port = _free_port()
        settings = ControllerSettings(
            host="127.0.0.1", health_port=port, metrics_port=0, agl_enabled=False,
            datastore_url="http://127.0.0.1:9", git_cache_dir=tmp_path / "git",
        )
        with ControllerThread(settings, kubeconfig):
            response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
            assert response.status_code == 200
