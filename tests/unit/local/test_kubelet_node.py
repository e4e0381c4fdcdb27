"""The local kubelet's Node duties (local/burrito_local/kubelet_node.py): the objects it writes, the log window,
and the kubelet API admitting kube-apiserver's kubelet client only."""

from __future__ import annotations

import socket
import ssl
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from burrito_local.kube_tls import CertificateAuthority
from burrito_local.kubelet_node import NodeAgent, NodeMode, lease_body, log_window, node_object, node_status
from hypothesis import given
from hypothesis import strategies as st


def mode(ca: CertificateAuthority | None = None, port: int = 10250) -> NodeMode:
    ca = ca or CertificateAuthority.create()
    cert, key = ca.issue_server("node", ["127.0.0.1"])
    return NodeMode(address="127.0.0.1", pod_cidr="10.244.1.0/24", serving_cert_pem=cert, serving_key_pem=key,
                    client_ca_pem=ca.cert_pem, api_port=port)


def test_the_node_object_has_no_restricted_labels() -> None:
    node = node_object("n1")
    assert node["metadata"]["name"] == "n1"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "n1"
    assert not any(k.startswith("node-restriction.kubernetes.io/") for k in node["metadata"]["labels"])


def test_the_status_keeps_transition_times_across_heartbeats() -> None:
    transitions: dict[str, str] = {}
    first = node_status(mode(), "2026-01-01T00:00:00Z", transitions)
    later = node_status(mode(), "2026-01-01T00:01:00Z", transitions)
    ready = next(c for c in later["conditions"] if c["type"] == "Ready")
    assert ready == {**ready, "status": "True", "lastHeartbeatTime": "2026-01-01T00:01:00Z",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"}
    assert first["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
    assert later["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}


def test_the_lease_is_owned_by_the_node() -> None:
    lease = lease_body("n1", "uid-1", 40, "2026-01-01T00:00:00.000000Z", "7")
    owner = {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-1"}
    assert lease["metadata"] == {"name": "n1", "namespace": "kube-node-lease", "resourceVersion": "7",
                                 "ownerReferences": [owner]}
    assert lease["spec"] == {"holderIdentity": "n1", "leaseDurationSeconds": 40,
                             "renewTime": "2026-01-01T00:00:00.000000Z"}


@given(st.lists(st.binary(max_size=8).map(lambda b: b.replace(b"\n", b"") + b"\n"), max_size=8),
       st.none() | st.integers(0, 10), st.none() | st.integers(0, 40))
def test_the_log_window_is_the_tail_then_the_limit(lines: list[bytes], tail: int | None, limit: int | None) -> None:
    window = log_window(b"".join(lines), tail, limit)
    expected = b"".join(lines if tail is None else lines[-tail:] if tail else [])
    assert window == (expected if limit is None else expected[:limit])


class _NoApi:
    async def call(self, *_: Any, **__: Any) -> Any:
        raise AssertionError("the kubelet API test makes no API call")


def _client(trusted: CertificateAuthority, signer: CertificateAuthority, user: str | None) -> ssl.SSLContext:
    """A client that trusts `trusted` and, unless `user` is None, presents `user`'s certificate from `signer`."""
    context = ssl.create_default_context(cadata=trusted.cert_pem.decode())
    if user is not None:
        cert, key = signer.issue_client(user)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "c").write_bytes(cert)
            (Path(tmp) / "k").write_bytes(key)
            context.load_cert_chain(Path(tmp) / "c", Path(tmp) / "k")
    return context


@pytest.mark.parametrize(("user", "forged"), [("kube-apiserver-kubelet-client", False),
                                              ("system:node:other", False), ("someone", False),
                                              ("kube-apiserver-kubelet-client", True), (None, False)])
async def test_the_kubelet_api_admits_only_the_api_servers_kubelet_client(
        tmp_path: Path, user: str | None, forged: bool) -> None:
    """Anyone who reaches the node's address could ask for any pod's log: only kube-apiserver's kubelet
    client certificate (the cluster CA's, with that CN) is admitted; a look-alike from another CA gets no
    TLS session, another identity of the cluster a 403."""
    ca = CertificateAuthority.create()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "ns" / "pod" / "main.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"one\ntwo\nthree\n")
    agent = NodeAgent(_NoApi(), "n1", mode(ca, port),  # type: ignore[arg-type]
                      lambda ns, pod, c: tmp_path / ns / pod / f"{c}.log", lambda ns, pod: False)
    await agent.serve()
    try:
        context = _client(ca, CertificateAuthority.create() if forged else ca, user)
        url = f"https://127.0.0.1:{port}/containerLogs/ns/pod/main?tailLines=2"
        async with aiohttp.ClientSession() as session:
            try:
                async with session.get(url, ssl=context) as response:
                    status, body = response.status, await response.text()
            except (aiohttp.ClientError, ssl.SSLError, ConnectionError):
                status, body = 0, ""
    finally:
        await agent.close()
    if user == "kube-apiserver-kubelet-client" and not forged:
        assert (status, body) == (200, "two\nthree\n")
    elif user is None or forged:
        assert status == 0  # the TLS handshake fails
    else:
        assert status == 403 and f"user={user}" in body


def test_a_host_network_node_gives_every_pod_its_own_address():
    from burrito_local.workloads import NodeAddress

    addresses = NodeAddress("192.0.2.2")
    assert [addresses.allocate() for _ in range(3)] == ["192.0.2.2"] * 3
    addresses.release("192.0.2.2")
    assert addresses.allocate() == "192.0.2.2"


@pytest.mark.parametrize("address,usable", [
    ("192.0.2.2", True), ("10.1.2.3", True), ("127.0.0.1", False), ("127.10.0.5", False),
    ("169.254.1.1", False), ("224.0.0.1", False), ("0.0.0.0", False),  # noqa: S104  (refused, never bound)
    ("::1", False), ("2001:db8::1", False),
])
def test_a_node_address_is_one_kube_apiserver_accepts_and_proxies_to(address: str, usable: bool):
    from burrito_local.host_node import usable_node_address

    assert usable_node_address(address) is usable


def test_the_node_address_found_on_this_machine_is_usable():
    from burrito_local.host_node import node_address, usable_node_address

    found = node_address()
    assert found is None or usable_node_address(found)
