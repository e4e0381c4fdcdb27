"""KUBE-API-FIDELITY.md § Test-side extras: start/stop, kubeconfig, direct reads, request log, faults, CLI."""

from __future__ import annotations

import base64
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from burrito_local.apiserver import ApiServer
from kubernetes import client, config

from tests.integration.apiserver.conftest import CMS, cm
from tests.support.emulator import running_apiserver, wait_for

REPO = Path(__file__).resolve().parents[3]


def test_start_and_stop_take_milliseconds_on_a_free_port_and_free_it() -> None:
    durations = []
    for _ in range(10):
        began = time.perf_counter()
        server = ApiServer().start()
        durations.append(time.perf_counter() - began)
        port = server.port
        assert port > 0 and httpx.get(f"{server.url}/healthz").text == "ok"
        server.stop()
        server.stop()  # idempotent
        with socket.socket() as probe:  # the port is free again
            probe.bind(("127.0.0.1", port))
    assert statistics.median(durations) < 0.05


def test_default_and_kube_system_namespaces_and_default_service_accounts_exist(apiserver: ApiServer) -> None:
    for ns in ("default", "kube-system"):
        assert apiserver.get_object("v1", "namespaces", None, ns) is not None
        assert apiserver.get_object("v1", "serviceaccounts", ns, "default") is not None


def test_write_kubeconfig_is_what_clients_and_kubectl_use(apiserver: ApiServer, tmp_path: Path) -> None:
    path = apiserver.write_kubeconfig(tmp_path / "sub" / "kubeconfig", namespace="kube-system")
    written = yaml.safe_load(path.read_text())
    assert written["current-context"] == "burrito-py-local"
    cluster = written["clusters"][0]["cluster"]
    # HTTPS with the emulator's CA: kubectl sends the kubeconfig's token to https servers only.
    assert cluster["server"] == apiserver.tls_url and cluster["server"].startswith("https://")
    assert base64.b64decode(cluster["certificate-authority-data"]) == apiserver.certificate.ca_pem
    assert written["users"][0]["user"] == {"token": apiserver.admin_token}
    assert written["contexts"][0]["context"]["namespace"] == "kube-system"
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(path)))
    assert "default" in [n.metadata.name for n in api.list_namespace().items]
    shown = subprocess.run(["kubectl", "--kubeconfig", str(path), "get", "serviceaccounts", "-o", "name"],
                           capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "serviceaccount/default"  # the context's namespace is kube-system


def test_get_object_and_list_objects_read_copies_directly(apiserver: ApiServer, kube: Any) -> None:
    client.CoreV1Api(kube).create_namespaced_config_map("default", {"metadata": {"name": "a"}, "data": {"k": "v"}})
    obj = apiserver.get_object("v1", "configmaps", "default", "a")
    assert obj is not None and obj["data"] == {"k": "v"}
    obj["data"]["k"] = "mutated"
    assert apiserver.get_object("v1", "configmaps", "default", "a")["data"] == {"k": "v"}  # type: ignore[index]
    assert apiserver.get_object("v1", "configmaps", "default", "nope") is None
    assert [o["metadata"]["name"] for o in apiserver.list_objects("v1", "configmaps", "default")] == ["a"]
    assert apiserver.list_objects("v1", "configmaps", "kube-system") == []
    assert {o["metadata"]["name"] for o in apiserver.list_objects("v1", "namespaces")} >= {"default", "kube-system"}


def test_requests_are_recorded_with_method_path_query_and_time(apiserver: ApiServer, http: httpx.Client) -> None:
    apiserver.clear_requests()
    before = time.time()
    http.post(CMS, json=cm("a"))
    http.get(CMS, params={"labelSelector": "a=b"})
    records = [(r.method, r.path, r.query) for r in apiserver.requests]
    assert records == [("POST", CMS, {}), ("GET", CMS, {"labelSelector": "a=b"})]
    assert all(before <= r.time <= time.time() for r in apiserver.requests)
    apiserver.clear_requests()
    assert apiserver.requests == []


def test_injected_faults_answer_with_a_status_or_delay_a_given_number_of_times(
    apiserver: ApiServer, http: httpx.Client
) -> None:
    apiserver.inject_fault("POST", r"/configmaps$", status=500, times=2)
    for _ in range(2):
        failed = http.post(CMS, json=cm("a"))
        assert failed.status_code == 500 and failed.json()["reason"] == "InternalError"
    assert http.post(CMS, json=cm("a")).status_code == 201
    apiserver.inject_fault("*", r"/configmaps/a$", status=409)
    assert http.get(f"{CMS}/a").json()["reason"] == "Conflict"
    apiserver.inject_fault("PATCH", r"/configmaps/a$", status=429)
    throttled = http.patch(f"{CMS}/a", json={}, headers={"Content-Type": "application/merge-patch+json"})
    assert throttled.status_code == 429 and throttled.json()["reason"] == "TooManyRequests"
    apiserver.inject_fault("GET", r"/configmaps/a$", delay=0.3)
    began = time.monotonic()
    assert http.get(f"{CMS}/a").status_code == 200 and time.monotonic() - began >= 0.3
    began = time.monotonic()
    http.get(f"{CMS}/a")
    assert time.monotonic() - began < 0.3


def test_faults_can_be_injected_from_another_thread_while_serving(apiserver: ApiServer, http: httpx.Client) -> None:
    injector = threading.Thread(target=lambda: apiserver.inject_fault("GET", "/configmaps", status=503, times=1))
    injector.start()
    injector.join()
    assert http.get(CMS).status_code == 503 and http.get(CMS).status_code == 200


def test_running_apiserver_helper_writes_a_kubeconfig_and_stops(tmp_path: Path) -> None:
    with running_apiserver(tmp_path, kubeconfig=tmp_path / "kc") as server:
        url = server.url
        assert yaml.safe_load((tmp_path / "kc").read_text())["clusters"][0]["cluster"]["server"] == server.tls_url
        assert server.pod_log_dir == tmp_path / "pod-logs"
    try:
        httpx.get(f"{url}/healthz", timeout=1)
        raise AssertionError("the server still answers after stop")
    except httpx.TransportError:
        pass


def test_burrito_py_local_apiserver_runs_standalone(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "burrito_py.cli", "local", "apiserver", "--port", str(port), "--kubeconfig",
         str(kubeconfig)], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == f"Kubernetes API emulator listening on http://127.0.0.1:{port}"
        wait_for(kubeconfig.exists)
        got = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "get", "ns", "default", "-o", "name"],
                             capture_output=True, text=True, check=True)
        assert got.stdout.strip() == "namespace/default"
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(10) == 0


def test_the_request_log_keeps_the_newest_records_when_bounded(apiserver: ApiServer, http: httpx.Client) -> None:
    apiserver.clear_requests()
    apiserver.max_requests = 10
    for i in range(30):
        http.get(f"{CMS}/n{i}")
    assert len(apiserver.requests) <= 10 and apiserver.requests[-1].path == f"{CMS}/n29"
