"""The local kubelet as a Node of a real control plane (docs/architecture.md §22.3): what a node owes the
API besides running pods, and the kubelet API that `kubectl logs` reaches through kube-apiserver.

Pure parts (the Node, its status and its Lease as the kubelet writes them; the window of a log a request
asks for) are functions here; `NodeAgent` does the I/O: it registers the Node, renews its Lease in
`kube-node-lease` every `lease_seconds / 4`, refreshes the Node's status every `status_seconds`, and serves
`GET /containerLogs/{namespace}/{pod}/{container}` and `/healthz` over HTTPS to kube-apiserver only (a client
certificate of the cluster CA with the CN `NodeMode.api_client`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import platform
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from burrito_local.kube_client import ApiFailure, KubeHttp
from burrito_py.timeutil import format_time, utcnow

log = logging.getLogger(__name__)
Obj = dict[str, Any]
KUBELET_VERSION = "v1.37.2"  # the control plane's version (controlplane/go.mod): kubectl shows it per node
RUNTIME = "burrito-py://local-process"
LEASE_NAMESPACE = "kube-node-lease"
_CAPACITY = {"cpu": "2", "memory": "8Gi", "pods": "110", "ephemeral-storage": "50Gi"}
_MICRO = "%Y-%m-%dT%H:%M:%S.%fZ"  # Lease times are MicroTime


@dataclass(frozen=True)
class NodeMode:
    """How the local kubelet acts as a Node of a real control plane (instead of the emulator's node-less
    mode): its address (the Node's InternalIP, where the kubelet API listens), the network its pods get
    addresses from, the kubelet API's serving certificate, and whom that API admits."""

    address: str
    pod_cidr: str
    serving_cert_pem: bytes
    serving_key_pem: bytes
    client_ca_pem: bytes  # the cluster CA: kube-apiserver's kubelet client certificate is signed by it
    api_client: str = "kube-apiserver-kubelet-client"
    api_port: int = 10250
    capacity: dict[str, str] = field(default_factory=lambda: dict(_CAPACITY))
    lease_seconds: int = 40
    status_seconds: float = 60.0
    # A kubeconfig as `system:kube-proxy` (bound to `system:node-proxier`): the Services and Endpoints
    # the kubelet proxies. A node may not list Endpoints; without it, no Service is proxied.
    proxy_kubeconfig: Path | None = None
    # Every pod shares the node's network, as a `hostNetwork: true` pod does: its address is the node's (the
    # e2e world, where pods only connect out; docs/architecture.md §22.8). `pod_cidr` is then unused.
    host_network: bool = False
    # Taints the Node registers with (the kubelet's --register-with-taints): a node only the pods tolerating
    # them are scheduled to, e.g. a second node of a shared control plane kept for one test's pods.
    taints: tuple[Obj, ...] = ()


def node_object(name: str, taints: tuple[Obj, ...] = ()) -> Obj:
    """The Node a kubelet registers (NodeRestriction: it may create only its own, and no
    `node-restriction.kubernetes.io/` labels), with `taints` from its first moment, so the scheduler never
    places an intolerant pod on it."""
    node: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": _arch(),
        "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": _arch()}}}
    if taints:
        node["spec"] = {"taints": [dict(taint) for taint in taints]}
    return node


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def node_status(mode: NodeMode, now: str, transitions: dict[str, str]) -> Obj:
    """The Node's whole status: Ready, no pressure, its address and the kubelet API's port. `transitions`
    holds each condition's lastTransitionTime (kept across heartbeats; set on the first)."""
    wanted = {"MemoryPressure": ("False", "KubeletHasSufficientMemory"),
              "DiskPressure": ("False", "KubeletHasNoDiskPressure"),
              "PIDPressure": ("False", "KubeletHasSufficientPID"),
              "Ready": ("True", "KubeletReady")}
    conditions = []
    for kind, (status, reason) in wanted.items():
        transitions.setdefault(kind, now)
        conditions.append({"type": kind, "status": status, "reason": reason,
                           "message": "the burrito-py local kubelet is posting ready status" if kind == "Ready"
                           else reason, "lastHeartbeatTime": now, "lastTransitionTime": transitions[kind]})
    return {
        "capacity": dict(mode.capacity), "allocatable": dict(mode.capacity), "conditions": conditions,
        "addresses": [{"type": "InternalIP", "address": mode.address}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": mode.api_port}},
        "nodeInfo": {"kubeletVersion": KUBELET_VERSION, "containerRuntimeVersion": RUNTIME,
                     "operatingSystem": "linux", "architecture": _arch(), "kernelVersion": platform.release(),
                     "osImage": "", "machineID": "", "systemUUID": "", "bootID": "", "kubeProxyVersion": ""},
    }


def lease_body(node: str, node_uid: str, seconds: int, renewed: str, resource_version: str | None = None) -> Obj:
    """The node's Lease in kube-node-lease, owned by its Node (it goes when the Node goes)."""
    meta: Obj = {"name": node, "namespace": LEASE_NAMESPACE, "ownerReferences": [
        {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": node, "leaseDurationSeconds": seconds, "renewTime": renewed}}


def log_window(data: bytes, tail_lines: int | None, limit_bytes: int | None) -> bytes:
    """What `/containerLogs` returns of a log: its last `tail_lines` lines, then at most `limit_bytes`."""
    if tail_lines is not None:
        pieces = data.split(b"\n")  # lines end at \n only (a \r of a progress bar is no line end)
        lines = [piece + b"\n" for piece in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
        data = b"".join(lines[-tail_lines:]) if tail_lines > 0 else b""
    if limit_bytes is not None:
        data = data[:limit_bytes]
    return data


def _server_context(mode: NodeMode) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="burrito-py-kubelet-tls-") as tmp:  # ssl reads key pairs from files
        cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert.write_bytes(mode.serving_cert_pem)
        key.write_bytes(mode.serving_key_pem)
        context.load_cert_chain(cert, key)
    context.load_verify_locations(cadata=mode.client_ca_pem.decode())
    context.verify_mode = ssl.CERT_REQUIRED  # no certificate of the cluster CA, no TLS session at all
    return context


def _common_name(peercert: Any) -> str | None:
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class NodeAgent:
    """The node's side of the API: registration, heartbeats (Lease + status) and the kubelet API.
    `log_path(namespace, pod, container)` and `pod_finished(namespace, pod)` come from the kubelet."""

    def __init__(self, http: KubeHttp, name: str, mode: NodeMode,
                 log_path: Callable[[str, str, str], Path], pod_running: Callable[[str, str], bool]) -> None:
        self._http, self._name, self._mode = http, name, mode
        self._log_path, self._pod_running = log_path, pod_running
        self._transitions: dict[str, str] = {}
        self._node_uid = ""
        self._runner: web.AppRunner | None = None
        self.poll_interval = 0.1  # how often a followed log looks for more output

    async def register(self) -> None:
        """Create the Node (or find it, after a restart), then post its status: Ready from now on."""
        try:
            node = await self._http.call("POST", "/api/v1/nodes", node_object(self._name, self._mode.taints))
        except ApiFailure as exc:
            if exc.status != 409:
                raise
            node = await self._http.call("GET", f"/api/v1/nodes/{self._name}")
        self._node_uid = node["metadata"]["uid"]
        await self.post_status()
        await self.renew_lease()

    async def post_status(self) -> None:
        status = node_status(self._mode, format_time(utcnow()), self._transitions)
        await self._http.call("PATCH", f"/api/v1/nodes/{self._name}/status", {"status": status},
                              "application/strategic-merge-patch+json")

    async def renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{self._name}"
        now = utcnow().strftime(_MICRO)
        try:
            current = await self._http.call("GET", path)
        except ApiFailure as exc:
            if exc.status != 404:
                raise
            await self._http.call("POST", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases",
                                  lease_body(self._name, self._node_uid, self._mode.lease_seconds, now))
            return
        body = lease_body(self._name, self._node_uid, self._mode.lease_seconds, now,
                          current["metadata"]["resourceVersion"])
        await self._http.call("PUT", path, body)

    async def heartbeat(self, stopping: asyncio.Event) -> None:
        """Renew the Lease every quarter of its duration and the status every `status_seconds`, until
        `stopping`; a failed renewal is retried at the next beat (the Lease has three beats of slack)."""
        loop = asyncio.get_running_loop()
        next_status = loop.time() + self._mode.status_seconds
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self._mode.lease_seconds / 4)
            if stopping.is_set():
                return
            try:
                await self.renew_lease()
                if loop.time() >= next_status:
                    await self.post_status()
                    next_status = loop.time() + self._mode.status_seconds
            except Exception as exc:  # the API went away for a moment: the next beat tries again
                log.warning("kubelet: node heartbeat failed: %s", exc)

    # -- the kubelet API ---------------------------------------------------------------------------
    async def serve(self) -> None:
        app = web.Application(middlewares=[self._only_the_api_server])
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._container_logs)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._mode.address, self._mode.api_port,
                           ssl_context=_server_context(self._mode))
        await site.start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _only_the_api_server(self, request: web.Request,
                                   handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                                   ) -> web.StreamResponse:
        """TLS already required a certificate of the cluster CA; of those, only kube-apiserver's kubelet
        client is admitted (a node, a pod's service account or a user certificate gets 403)."""
        transport = request.transport
        user = _common_name(transport.get_extra_info("peercert") if transport is not None else None)
        if user != self._mode.api_client:
            raise web.HTTPForbidden(text=f"Forbidden (user={user}, verb=get, resource=nodes, subresource=proxy)\n")
        return await handler(request)

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _container_logs(self, request: web.Request) -> web.StreamResponse:
        namespace, pod, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        try:
            tail = int(request.query["tailLines"]) if request.query.get("tailLines") else None
            limit = int(request.query["limitBytes"]) if request.query.get("limitBytes") else None
        except ValueError:
            raise web.HTTPBadRequest(text="tailLines and limitBytes must be integers\n") from None
        path = self._log_path(namespace, pod, container)
        if not path.is_file():
            raise web.HTTPNotFound(text=f'container "{container}" in pod "{pod}" has no log\n')
        data = path.read_bytes()
        offset = len(data)
        text = log_window(data, tail, limit)
        if request.query.get("follow") not in ("true", "1"):
            return web.Response(body=text, content_type="text/plain")
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(text)
        with contextlib.suppress(ConnectionResetError, asyncio.CancelledError):
            while True:
                running = self._pod_running(namespace, pod)
                with path.open("rb") as handle:
                    handle.seek(offset)
                    chunk = handle.read()
                if chunk:
                    offset += len(chunk)
                    await response.write(chunk)
                if not running or not path.exists():
                    break
                await asyncio.sleep(self.poll_interval)
        return response


__all__ = ["NodeAgent", "NodeMode", "lease_body", "log_window", "node_object", "node_status"]
