"""The emulator serves kube-apiserver's service proxy: `/api/v1/namespaces/{ns}/services/{name}:{port}/proxy/…`
reaches a Ready endpoint of the Service, under RBAC (`services/proxy`), without forwarding the caller's
`Authorization`; kubectl uses it as it does on a cluster."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from burrito_local.apiserver import ApiServer

from tests.integration.apiserver.test_rbac import RBAC, account, client_for, create, role

BASE = "/api/v1/namespaces/default/services/echo:8080/proxy"


class _Echo(BaseHTTPRequestHandler):
    """Answers with what it received: method, path, headers and body."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        payload = json.dumps({"method": self.command, "path": self.path, "headers": dict(self.headers.items()),
                              "body": body}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def echo() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def publish(http: httpx.Client, port: int | None, ready: bool = True) -> None:
    """Service default/echo (port 8080 "http") with hand-written Endpoints at 127.0.0.1:`port`."""
    create(http, "/api/v1/namespaces/default/services", {
        "metadata": {"name": "echo"}, "spec": {"ports": [{"name": "http", "port": 8080, "targetPort": 8080}]}})
    if port is not None:
        key = "addresses" if ready else "notReadyAddresses"
        create(http, "/api/v1/namespaces/default/endpoints", {
            "metadata": {"name": "echo"},
            "subsets": [{key: [{"ip": "127.0.0.1"}], "ports": [{"name": "http", "port": port}]}]})


def test_a_request_reaches_the_endpoint_with_path_query_and_body_but_not_the_callers_token(
    http: httpx.Client, echo: int
) -> None:
    publish(http, echo)
    answer = http.post(f"{BASE}/api/v1/things/a%2Fb", params={"q": "1"}, content=b"payload",
                       headers={"X-Burrito-Py-Authorization": "Bearer for-the-backend"})
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    assert seen["method"] == "POST"
    assert seen["path"] == "/api/v1/things/a%2Fb?q=1"
    assert seen["body"] == "payload"
    headers = {k.lower(): v for k, v in seen["headers"].items()}
    assert "authorization" not in headers  # kube-apiserver's authentication filter deletes it
    assert headers["x-burrito-py-authorization"] == "Bearer for-the-backend"
    # By port name too, and with the scheme form.
    assert http.get("/api/v1/namespaces/default/services/echo:http/proxy/x").json()["path"] == "/x"
    assert http.get("/api/v1/namespaces/default/services/http:echo:8080/proxy/y").json()["path"] == "/y"


def test_no_ready_endpoint_is_503_and_an_unknown_service_404(http: httpx.Client, echo: int) -> None:
    publish(http, echo, ready=False)
    answer = http.get(f"{BASE}/x")
    assert answer.status_code == 503
    assert answer.json()["message"] == 'no endpoints available for service "echo"'
    missing = http.get("/api/v1/namespaces/default/services/nope:8080/proxy/x")
    assert missing.status_code == 404
    assert missing.json()["message"] == 'services "nope" not found'
    assert http.get("/api/v1/namespaces/default/services/echo:9999/proxy/x").status_code == 503


def test_rbac_services_proxy_with_the_name_and_port_as_resource_name(
    apiserver: ApiServer, http: httpx.Client, echo: int
) -> None:
    publish(http, echo)
    with client_for(apiserver, account(http, "default", "reader")) as reader:
        denied = reader.get(f"{BASE}/x")
        assert denied.status_code == 403
        assert 'cannot get resource "services/proxy"' in denied.json()["message"]
        role(http, "default", "proxy-echo", [{"apiGroups": [""], "resources": ["services/proxy"], "verbs": ["get"],
                                              "resourceNames": ["echo:8080"]}])
        create(http, f"{RBAC}/namespaces/default/rolebindings", {
            "metadata": {"name": "proxy-echo"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "proxy-echo"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}]})
        assert reader.get(f"{BASE}/x").status_code == 200
        assert reader.post(f"{BASE}/x", content=b"").status_code == 403  # POST is `create`
        assert reader.get("/api/v1/namespaces/default/services/echo:http/proxy/x").status_code == 403


def test_kubectl_get_raw_goes_through_the_proxy(apiserver: ApiServer, http: httpx.Client, echo: int,
                                                tmp_path: Path) -> None:
    publish(http, echo)
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    out = subprocess.run(["kubectl", "get", "--raw", f"{BASE}/hello?x=1"], capture_output=True, text=True,
                         timeout=60, check=True, env={**os.environ, "KUBECONFIG": str(kubeconfig)}).stdout
    assert json.loads(out)["path"] == "/hello?x=1"
