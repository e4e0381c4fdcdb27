"""The fault proxy in front of kube-apiserver (tests/support/fault_proxy.py, docs/architecture.md §22.8): what the
fault e2e tests rely on, checked against the real control plane — a fault before the request (nothing written),
a fault after it (written, the client told 500), the caller's own token reaching RBAC unchanged, and a watch
streamed event by event."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from burrito_local.controlplane import ControlPlane

from tests.support.controlplane import unique_namespace
from tests.support.fault_proxy import FaultProxy

RBAC = "rbac.authorization.k8s.io"


def _ok(answer: tuple[int, Any]) -> Any:
    status, body = answer
    assert status in (200, 201), (status, body)
    return body


def _account_token(plane: ControlPlane, namespace: str, name: str, verbs: list[str] | None) -> str:
    """A ServiceAccount's token; `verbs` on configmaps granted through a Role (None: no grant at all)."""
    admin = plane.admin_client()
    _ok(admin.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                   {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}))
    if verbs is not None:
        _ok(admin.call("POST", f"/apis/{RBAC}/v1/namespaces/{namespace}/roles", {
            "apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}]}))
        _ok(admin.call("POST", f"/apis/{RBAC}/v1/namespaces/{namespace}/rolebindings", {
            "apiVersion": f"{RBAC}/v1", "kind": "RoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}))
    body = _ok(admin.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                          {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                           "spec": {"expirationSeconds": 3600}}))
    return str(body["status"]["token"])


@pytest.fixture
def proxy(controlplane: ControlPlane, tmp_path: Path) -> Iterator[FaultProxy]:
    pki = controlplane.pki
    with FaultProxy(controlplane.server, pki.ca_crt.read_bytes(), pki.ca_key.read_bytes(), tmp_path / "proxy") as p:
        yield p


def _through(proxy: FaultProxy, plane: ControlPlane, token: str) -> httpx.Client:
    """A client of the proxy that trusts only the cluster's CA (the proxy's certificate is that CA's)."""
    context = ssl.create_default_context(cadata=plane.ca_pem.decode())
    return httpx.Client(base_url=proxy.url, verify=context, timeout=30, headers={"Authorization": f"Bearer {token}"})


def _config_map(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


def test_a_fault_before_writes_nothing_and_a_fault_after_loses_only_the_answer(
        controlplane: ControlPlane, proxy: FaultProxy) -> None:
    namespace = unique_namespace(controlplane, "proxy")
    token = _account_token(controlplane, namespace, "writer", ["create", "get", "list", "watch"])
    collection = f"/api/v1/namespaces/{namespace}/configmaps"
    admin = controlplane.admin_client()
    with _through(proxy, controlplane, token) as api:
        proxy.inject_fault("POST", r"/configmaps$", status=500)
        refused = api.post(collection, json=_config_map("before"))
        assert refused.status_code == 500 and refused.json()["reason"] == "InternalError"
        assert admin.call("GET", f"{collection}/before")[0] == 404, "a fault before forwarding writes nothing"

        proxy.inject_fault("POST", r"/configmaps$", status=500, after=True)
        lost = api.post(collection, json=_config_map("after"))
        assert lost.status_code == 500, lost.text
        assert _ok(admin.call("GET", f"{collection}/after"))["data"] == {"k": "v"}, "the write happened"
        retried = api.post(collection, json=_config_map("after"))
        assert retried.status_code == 409, "the fault was used once; the retry meets the object"

        fine = api.get(f"{collection}/after")
        assert fine.status_code == 200 and fine.json()["metadata"]["name"] == "after"
    posts = [(r.method, r.path, r.status) for r in proxy.requests if r.method == "POST"]
    assert posts == [("POST", collection, 500), ("POST", collection, 500), ("POST", collection, 409)]
    proxy.clear_requests()
    assert proxy.requests == []


def test_the_callers_token_reaches_rbac_unchanged(controlplane: ControlPlane, proxy: FaultProxy) -> None:
    namespace = unique_namespace(controlplane, "proxy")
    token = _account_token(controlplane, namespace, "nobody", None)
    with _through(proxy, controlplane, token) as api:
        answer = api.get(f"/api/v1/namespaces/{namespace}/configmaps")
    assert answer.status_code == 403
    assert f"system:serviceaccount:{namespace}:nobody" in answer.json()["message"]
    with httpx.Client(base_url=proxy.url, verify=ssl.create_default_context(cadata=controlplane.ca_pem.decode()),
                      timeout=30) as anonymous:
        assert anonymous.get(f"/api/v1/namespaces/{namespace}/configmaps").status_code in (401, 403)


def test_a_watch_streams_through_the_proxy(controlplane: ControlPlane, proxy: FaultProxy) -> None:
    namespace = unique_namespace(controlplane, "proxy")
    token = _account_token(controlplane, namespace, "watcher", ["create", "get", "list", "watch"])
    admin = controlplane.admin_client()
    seen: list[tuple[str, float]] = []
    opened = threading.Event()

    def watch() -> None:
        with _through(proxy, controlplane, token) as api, api.stream(
                "GET", f"/api/v1/namespaces/{namespace}/configmaps",
                params={"watch": "true", "timeoutSeconds": "20"}) as response:
            assert response.status_code == 200
            opened.set()
            for line in response.iter_lines():
                event = json.loads(line)
                name = event["object"]["metadata"]["name"]
                if name.startswith("w-"):
                    seen.append((name, time.monotonic()))
                if len(seen) == 2:
                    return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert opened.wait(15)
    created: dict[str, float] = {}
    for name in ("w-1", "w-2"):
        created[name] = time.monotonic()
        _ok(admin.call("POST", f"/api/v1/namespaces/{namespace}/configmaps", _config_map(name)))
        time.sleep(1)
    watcher.join(20)
    assert [name for name, _ in seen] == ["w-1", "w-2"]
    # Each event as it happens, not when the watch ends: the first arrives before the second is created.
    assert seen[0][1] < created["w-2"], (seen, created)
