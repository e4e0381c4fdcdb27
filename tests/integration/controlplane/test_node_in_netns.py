"""The local kubelet as a real Node (local/burrito_local/kubelet_node.py), in a private user+network namespace
with the control plane (local/burrito_local/netns.py): the real scheduler places a pod on it, the pod runs as a
local process with a routable address and a token bound to it, and `kubectl logs` reads its output through
kube-apiserver and the kubelet API."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from burrito_local.netns import NODE_ADDRESS, NODE_NAME, POD_CIDR, NodeNamespace

pytestmark = pytest.mark.slow


def kubectl(cluster: NodeNamespace, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["kubectl", f"--kubeconfig={cluster.kubeconfig}", *args], capture_output=True,
                            text=True, timeout=90, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def get(cluster: NodeNamespace, *args: str) -> Any:
    return json.loads(kubectl(cluster, "get", *args, "-o", "json").stdout)


def wait(cluster: NodeNamespace, what: str, predicate: Any, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while (value := predicate()) is None or value is False:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.25)
    return value


def test_the_node_is_registered_ready_with_a_lease(node: NodeNamespace) -> None:
    registered = get(node, "node", NODE_NAME)
    conditions = {c["type"]: c["status"] for c in registered["status"]["conditions"]}
    assert conditions == {"Ready": "True", "MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False"}
    assert registered["status"]["addresses"] == [{"type": "InternalIP", "address": NODE_ADDRESS}]
    assert registered["status"]["allocatable"]["pods"] == "110"
    lease = get(node, "lease", NODE_NAME, "-n", "kube-node-lease")
    assert lease["spec"]["holderIdentity"] == NODE_NAME
    assert lease["metadata"]["ownerReferences"][0]["uid"] == registered["metadata"]["uid"]
    first = lease["spec"]["renewTime"]
    wait(node, "the Lease to be renewed",
         lambda: get(node, "lease", NODE_NAME, "-n", "kube-node-lease")["spec"]["renewTime"] != first, timeout=30)


def test_a_pod_is_scheduled_onto_the_node_and_its_log_read_through_the_api(node: NodeNamespace) -> None:
    kubectl(node, "create", "namespace", "logs")
    script = "echo hello from $POD_IP; kubectl auth whoami -o json"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hello", "namespace": "logs"},
           "spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "example.invalid/sh", "command": ["sh", "-c", script],
               "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]}}
    subprocess.run(["kubectl", f"--kubeconfig={node.kubeconfig}", "apply", "-f", "-"], input=json.dumps(pod),
                   text=True, check=True, capture_output=True)
    done = wait(node, "the pod to succeed",
                lambda: (p := get(node, "pod", "hello", "-n", "logs"))["status"].get("phase") == "Succeeded" and p)
    # The scheduler bound it (PodScheduled is its condition); the kubelet gave it an address of the pod range.
    assert done["spec"]["nodeName"] == NODE_NAME
    assert {c["type"]: c["status"] for c in done["status"]["conditions"]}["PodScheduled"] == "True"
    assert ipaddress.ip_address(done["status"]["podIP"]) in ipaddress.ip_network(POD_CIDR)
    assert done["status"]["hostIP"] == NODE_ADDRESS
    assert done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0

    logs = kubectl(node, "logs", "hello", "-n", "logs").stdout
    first, _, rest = logs.partition("\n")
    assert first == f"hello from {done['status']['podIP']}"
    # The pod's own credentials: a token bound to this very pod (TokenRequest through the Node authorizer).
    who = json.loads(rest)["status"]["userInfo"]
    assert who["username"] == "system:serviceaccount:logs:default"
    assert who["extra"]["authentication.kubernetes.io/pod-name"] == ["hello"]
    assert who["extra"]["authentication.kubernetes.io/pod-uid"] == [done["metadata"]["uid"]]
    assert who["extra"]["authentication.kubernetes.io/node-name"] == [NODE_NAME]
    tail = kubectl(node, "logs", "hello", "-n", "logs", "--tail=1").stdout
    assert tail == logs.splitlines(keepends=True)[-1]


def test_a_graceful_deletion_waits_for_the_kubelet(node: NodeNamespace, tmp_path: Path) -> None:
    kubectl(node, "create", "namespace", "grace")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper", "namespace": "grace"},
           "spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 3, "containers": [{
               "name": "main", "image": "example.invalid/sh",
               "command": ["sh", "-c", "trap 'sleep 1; exit 0' TERM; echo up; while :; do sleep 0.1; done"]}]}}
    subprocess.run(["kubectl", f"--kubeconfig={node.kubeconfig}", "apply", "-f", "-"], input=json.dumps(pod),
                   text=True, check=True, capture_output=True)
    wait(node, "the pod to run", lambda: get(node, "pod", "sleeper", "-n", "grace")["status"].get("phase") == "Running")
    wait(node, "its first line", lambda: kubectl(node, "logs", "sleeper", "-n", "grace").stdout == "up\n")
    kubectl(node, "delete", "pod", "sleeper", "-n", "grace", "--wait=false")
    # Kubernetes keeps the pod, with its deletionTimestamp, until the node confirms its containers are gone.
    terminating = get(node, "pod", "sleeper", "-n", "grace")
    assert terminating["metadata"]["deletionTimestamp"]
    wait(node, "the kubelet to confirm the deletion",
         lambda: kubectl(node, "get", "pod", "sleeper", "-n", "grace", check=False).returncode != 0, timeout=60)


def test_a_service_gets_the_pods_address_and_the_api_server_proxies_to_it(node: NodeNamespace) -> None:
    """What loopback pod addresses cannot do on a real control plane: an EndpointSlice holding the pod's
    address (validation refuses 127/8) and kube-apiserver's service proxy reaching it."""
    kubectl(node, "create", "namespace", "web")
    labels = {"app": "web"}
    objects = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "web", "labels": labels},
         "spec": {"containers": [{
             "name": "main", "image": "example.invalid/web",
             "command": ["python3", "-m", "http.server", "8080", "--bind", "$(POD_IP)"],
             "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
             "ports": [{"containerPort": 8080}],
             "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "web"},
         "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]}},
    ]
    subprocess.run(["kubectl", f"--kubeconfig={node.kubeconfig}", "apply", "-f", "-"], check=True,
                   input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}), text=True,
                   capture_output=True)

    def ready_endpoints() -> list[str] | None:
        slices = get(node, "endpointslices", "-n", "web", "-l", "kubernetes.io/service-name=web")["items"]
        found = [a for s in slices for e in s.get("endpoints") or () if (e.get("conditions") or {}).get("ready")
                 for a in e["addresses"]]
        return found or None

    addresses = wait(node, "the endpoint slice controller to publish the ready pod", ready_endpoints)
    assert addresses == [get(node, "pod", "web", "-n", "web")["status"]["podIP"]]
    page = kubectl(node, "get", "--raw", "/api/v1/namespaces/web/services/web:80/proxy/").stdout
    assert "Directory listing for /" in page
    # The API server's own Service has its routable address as endpoint too (no reconciler switched off).
    own = get(node, "endpointslices", "-n", "default", "-l", "kubernetes.io/service-name=kubernetes")["items"]
    assert [a for s in own for e in s["endpoints"] for a in e["addresses"]] == [NODE_ADDRESS]
