"""The local kubelet on this host as a Node of a control plane running on this host, its pods sharing the
node's network (`hostNetwork` semantics; docs/architecture.md §22.8).

The e2e world: the controllers, the datastore, the git servers and the fake providers run in the test
process on the host and listen on loopback; only runner pods run under the kubelet, and they only connect
out (to the API server, the datastore, git). So the pods need no address of their own: each gets the
node's, as a `hostNetwork: true` pod does, and reaches the host's loopback listeners as any process of
the host.

The node's address: the first IPv4 address of this machine's interfaces that is not loopback, link-local,
multicast or unspecified (`node_address()`), else 127.0.0.1. Measured on v1.37.2 (§22.8): kube-apiserver
takes a loopback InternalIP in the Node and a loopback podIP in pod status, and dials the kubelet API on it
(`kubectl logs` works); what a loopback address cannot have is an EndpointSlice or the API server's proxy
(§22.3), which runner pods never need. Pods that serve a Service run in the network namespace of §22.3
(`NodeNamespace`) instead.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Self

from burrito_local.controlplane import ControlPlane, ControlPlaneError, free_port
from burrito_local.kube_tls import CertificateAuthority
from burrito_local.kubelet import LocalKubelet
from burrito_local.kubelet_node import NodeMode

NODE_NAME = "burrito-py-node"
LOOPBACK = "127.0.0.1"  # no other address: pods still run and log, but back no Service (see above)


def usable_node_address(address: str) -> bool:
    """An address kube-apiserver takes as a node's (and a pod's) and proxies to: IPv4, not loopback,
    link-local, multicast or unspecified (validation's `ValidateNonSpecialIP`, the proxy's `IsProxyableIP`)."""
    ip = ipaddress.ip_address(address)
    return ip.version == 4 and not (ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified)


def node_address() -> str | None:
    """The first usable IPv4 address of this machine's interfaces (`ip -j -4 addr`), or None."""
    if shutil.which("ip") is None:
        return None
    result = subprocess.run(["ip", "-j", "-4", "addr", "show", "up"], capture_output=True, text=True, check=False,
                            timeout=10)
    if result.returncode != 0:
        return None
    for link in json.loads(result.stdout or "[]"):
        for info in link.get("addr_info") or ():
            address = str(info.get("local") or "")
            if address and usable_node_address(address):
                return address
    return None


class HostNode:
    """`LocalKubelet` in `NodeMode(host_network=True)` as Node `name` of `plane`, in this process. Its kubelet
    API listens on a free port of the node's address (two test workers on one machine each have a node)."""

    def __init__(self, plane: ControlPlane, workdir: Path, name: str = NODE_NAME, address: str | None = None,
                 ready_timeout: float = 60.0, runtime: str = "process", taints: tuple[dict[str, str], ...] = ()
                 ) -> None:
        """`runtime`: the kubelet's ("podman": containers from their images, docs/architecture.md §20);
        `taints`: the Node's from registration on."""
        self.plane, self.workdir, self.name = plane, workdir, name
        self.address = address
        self.runtime, self.taints = runtime, taints
        self.ready_timeout = ready_timeout
        self.kubelet: LocalKubelet | None = None
        self.ready_seconds = 0.0

    def start(self) -> Self:
        began = time.monotonic()
        address = self.address or node_address() or LOOPBACK
        self.address = address
        plane = self.plane
        ca = CertificateAuthority(plane.pki.ca_crt.read_bytes(), plane.pki.ca_key.read_bytes())
        serving_cert, serving_key = ca.issue_server(f"system:node:{self.name}", [address, self.name])
        node_config = plane.user_kubeconfig(self.workdir / "node.kubeconfig", f"system:node:{self.name}",
                                            ("system:nodes",))
        mode = NodeMode(address=address, pod_cidr=f"{address}/32", serving_cert_pem=serving_cert,
                        serving_key_pem=serving_key, client_ca_pem=plane.ca_pem, api_port=free_port(address),
                        host_network=True, taints=self.taints)
        self.kubelet = LocalKubelet(node_config, self.workdir / "pod-logs", self.workdir / "pods",
                                    node_name=self.name, node=mode, runtime=self.runtime)
        self.kubelet.start()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.ready_seconds = time.monotonic() - began
        return self

    def _wait_ready(self) -> None:
        """Ready when the scheduler may place pods: the Node is there and Ready."""
        client = self.plane.admin_client()
        deadline = time.monotonic() + self.ready_timeout
        while True:
            status, node = client.call("GET", f"/api/v1/nodes/{self.name}")
            conditions = ({c["type"]: c["status"] for c in (node.get("status") or {}).get("conditions") or ()}
                          if status == 200 and isinstance(node, dict) else {})
            if conditions.get("Ready") == "True":
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"node {self.name} not Ready after {self.ready_timeout:g}s (HTTP {status})")
            time.sleep(0.1)

    def pod_log(self, namespace: str, pod: str, container: str) -> Path:
        return self.workdir / "pod-logs" / namespace / pod / f"{container}.log"

    def stop(self) -> None:
        kubelet, self.kubelet = self.kubelet, None
        if kubelet is not None:
            kubelet.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
