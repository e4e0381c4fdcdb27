"""Workloads on the emulator over real HTTP: the controller manager makes a Deployment's pods and the
Services' Endpoints, the local kubelet runs them as processes with their own loopback IPs, restarts them,
probes them, proxies Services and resolves their names, and keeps projected tokens fresh."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from burrito_local.workloads import token_refresh_delay

from tests.support.emulator import LocalCluster, running_cluster, wait_for

SERVER = textwrap.dedent('''
    import http.server, os, sys
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/ready" and not os.path.exists(os.environ["GATE"]):
                self.send_response(503); self.end_headers(); return
            body = os.environ["HOSTNAME"].encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args): pass
    print("serving on", sys.argv[1], flush=True)
    http.server.ThreadingHTTPServer((sys.argv[1], 8080), Handler).serve_forever()
''')
CLIENT = textwrap.dedent('''
    from burrito_py.kube import pod_dns as dns
    dns.install()
    import urllib.request
    for url in ("http://web.{ns}.svc.cluster.local/", "http://web/", "http://web.{ns}:80/"):
        print(url, urllib.request.urlopen(url, timeout=5).read().decode(), flush=True)
''')


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    workdir = tmp_path_factory.mktemp("cluster")
    # Tokens of 600 s (the shortest TokenRequest allows) are renewed after a second here.
    with running_cluster(workdir, grace_seconds=2, backoff_base=0.2,
                         refresh_delay=lambda ttl: 1.0 if ttl == 600 else token_refresh_delay(ttl)) as c:
        yield c


@pytest.fixture
def http(cluster: LocalCluster) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=cluster.api.url, timeout=10, headers=cluster.api.admin_headers) as client:
        yield client


def namespace(http: httpx.Client, name: str) -> str:
    assert http.post("/api/v1/namespaces", json={"metadata": {"name": name}}).status_code == 201
    return name


def web_deployment(ns: str, gate: Path, replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"terminationGracePeriodSeconds": 2, "containers": [{
                    "name": "web", "image": "python",
                    "command": [sys.executable, "-c", SERVER], "args": ["$(POD_IP)"],
                    "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                            {"name": "GATE", "value": str(gate)}],
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 1},
                }]},
            },
        },
    }


def pods(http: httpx.Client, ns: str) -> list[dict[str, Any]]:
    return [p for p in http.get(f"/api/v1/namespaces/{ns}/pods").json()["items"]
            if not p["metadata"].get("deletionTimestamp")]


def running(http: httpx.Client, ns: str, count: int) -> list[dict[str, Any]] | None:
    found = [p for p in pods(http, ns) if (p.get("status") or {}).get("phase") == "Running"
             and (p["status"].get("containerStatuses") or [{}])[0].get("state", {}).get("running")]
    return found if len(found) == count and len(pods(http, ns)) == count else None


def subsets(http: httpx.Client, ns: str, name: str = "web") -> tuple[list[str], list[str]]:
    response = http.get(f"/api/v1/namespaces/{ns}/endpoints/{name}")
    if response.status_code != 200:
        return [], []
    ready = [a["ip"] for s in response.json().get("subsets") or () for a in s.get("addresses") or ()]
    waiting = [a["ip"] for s in response.json().get("subsets") or () for a in s.get("notReadyAddresses") or ()]
    return sorted(ready), sorted(waiting)


def condition(http: httpx.Client, ns: str, kind: str) -> str | None:
    deployment = http.get(f"/apis/apps/v1/namespaces/{ns}/deployments/web").json()
    return next((c["status"] for c in (deployment.get("status") or {}).get("conditions") or ()
                 if c["type"] == kind), None)


def kubectl(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", *args], capture_output=True, text=True, timeout=90,
                          env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}, check=False)


def test_a_deployment_runs_is_served_restarted_replaced_and_rolled(cluster: LocalCluster, http: httpx.Client,
                                                                   tmp_path: Path) -> None:
    ns = namespace(http, "shop")
    gate = tmp_path / "ready"
    service = {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"},
                                                     "ports": [{"port": 80, "targetPort": "http"}]}}
    created = http.post(f"/api/v1/namespaces/{ns}/services", json=service).json()
    assert created["spec"]["clusterIP"].startswith("127.20.")
    assert http.post(f"/apis/apps/v1/namespaces/{ns}/deployments", json=web_deployment(ns, gate)).status_code == 201

    first = wait_for(lambda: running(http, ns, 2), 30, 0.05, "two running pods")
    ips = {p["status"]["podIP"] for p in first}
    assert len(ips) == 2 and all(ip.startswith("127.10.") for ip in ips)
    for pod in first:
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
        assert pod["metadata"]["name"].startswith(f"web-{pod['metadata']['labels']['pod-template-hash']}-")
    # Running but not Ready: the probe fails until the gate exists, so no endpoint serves yet.
    wait_for(lambda: subsets(http, ns)[1] == sorted(ips), 30, 0.05, "both pods under notReadyAddresses")
    assert subsets(http, ns)[0] == []
    assert condition(http, ns, "Available") == "False"
    connect = f"import socket; socket.create_connection(('{created['spec']['clusterIP']}', 80), 2)"
    refused = subprocess.run([sys.executable, "-c", connect], capture_output=True, text=True, check=False)
    assert "Connection refused" in refused.stderr

    gate.touch()
    wait_for(lambda: subsets(http, ns) == (sorted(ips), []), 30, 0.05, "both pods ready in the Endpoints")
    wait = kubectl(cluster, "wait", "-n", ns, "--for=condition=Available", "deploy/web", "--timeout=60s")
    assert wait.returncode == 0, wait.stderr
    status = kubectl(cluster, "rollout", "status", "-n", ns, "deploy/web", "--timeout=60s")
    assert status.returncode == 0 and "successfully rolled out" in status.stdout, status.stdout + status.stderr

    # Through the service proxy, by DNS name, from a process the kubelet runs.
    client = {"metadata": {"name": "client"}, "spec": {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "python", "command": [sys.executable, "-c", CLIENT.format(ns=ns)]}]}}
    http.post(f"/api/v1/namespaces/{ns}/pods", json=client)
    wait_for(lambda: (http.get(f"/api/v1/namespaces/{ns}/pods/client").json().get("status") or {}).get("phase")
             in ("Succeeded", "Failed"), 30, 0.05, "the client to finish")
    output = http.get(f"/api/v1/namespaces/{ns}/pods/client/log").text
    names = {p["metadata"]["name"] for p in first}
    assert http.get(f"/api/v1/namespaces/{ns}/pods/client").json()["status"]["phase"] == "Succeeded", output
    assert len(output.splitlines()) == 3 and all(line.split()[1] in names for line in output.splitlines()), output
    http.delete(f"/api/v1/namespaces/{ns}/pods/client")

    # A process that dies is restarted in place.
    victim = first[0]
    pid = int(victim["status"]["containerStatuses"][0]["containerID"].removeprefix("local://"))
    os.killpg(pid, signal.SIGKILL)

    def restarted() -> dict[str, Any] | None:
        pod = http.get(f"/api/v1/namespaces/{ns}/pods/{victim['metadata']['name']}").json()
        container = pod["status"]["containerStatuses"][0]
        return pod if container["restartCount"] == 1 and container["ready"] else None

    pod = wait_for(restarted, 30, 0.05, "the killed container to restart")
    assert pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 128 + signal.SIGKILL
    assert pod["status"]["podIP"] == victim["status"]["podIP"]

    # A deleted pod is replaced.
    http.delete(f"/api/v1/namespaces/{ns}/pods/{victim['metadata']['name']}")
    after = wait_for(lambda: running(http, ns, 2), 30, 0.05, "a replacement pod")
    assert victim["metadata"]["name"] not in {p["metadata"]["name"] for p in after}
    wait_for(lambda: condition(http, ns, "Available") == "True" and len(subsets(http, ns)[0]) == 2, 30, 0.05)

    # A template change (a config checksum) rolls every pod, never leaving none ready.
    old_hash = after[0]["metadata"]["labels"]["pod-template-hash"]
    patch = {"spec": {"template": {"metadata": {"annotations": {"checksum/config": "2"}}}}}
    http.patch(f"/apis/apps/v1/namespaces/{ns}/deployments/web", json=patch,
               headers={"Content-Type": "application/merge-patch+json"})
    lowest = 2

    def rolled() -> bool:
        nonlocal lowest
        lowest = min(lowest, len(subsets(http, ns)[0]))
        current = pods(http, ns)
        return len(current) == 2 and all(p["metadata"]["labels"]["pod-template-hash"] != old_hash
                                         for p in current) and len(subsets(http, ns)[0]) == 2
    wait_for(rolled, 60, 0.02, "the rollout")
    assert lowest >= 1, "the rollout left no ready pod"
    assert all(p["metadata"]["annotations"] == {"checksum/config": "2"} for p in pods(http, ns))
    status = kubectl(cluster, "rollout", "status", "-n", ns, "deploy/web", "--timeout=60s")
    assert status.returncode == 0, status.stderr

    scaled = kubectl(cluster, "scale", "-n", ns, "deploy/web", "--replicas=1")
    assert scaled.returncode == 0, scaled.stderr
    wait_for(lambda: running(http, ns, 1), 30, 0.05, "scale down to one pod")


def test_volumes_tokens_and_claims_outlive_pods(cluster: LocalCluster, http: httpx.Client) -> None:
    ns = namespace(http, "vols")
    http.post(f"/api/v1/namespaces/{ns}/secrets", json={"metadata": {"name": "s"},
                                                         "stringData": {"pw": "hunter2", "other": "x"}})
    http.post(f"/api/v1/namespaces/{ns}/configmaps", json={"metadata": {"name": "c"}, "data": {"mode": "fast"}})
    claim = http.post(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", json={
        "metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
                                               "resources": {"requests": {"storage": "1Gi"}}}})
    assert claim.status_code == 201
    wait_for(lambda: (http.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data").json().get("status") or {})
             .get("phase") == "Bound", 10, 0.05, "the claim to be Bound")
    code = ("import os, time; root = os.environ['BURRITO_LOCAL_ROOT']\n"
            "open(root + '/data/visits', 'a').write(os.environ['HOSTNAME'] + '\\n')\n"
            "open(root + '/scratch/x', 'w').write('x')\n"
            "time.sleep(3600)")
    deployment = {
        "metadata": {"name": "app"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "app"}},
                                              "template": {"metadata": {"labels": {"app": "app"}}, "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": "x", "command": [sys.executable, "-c", code],
                            "volumeMounts": [
                                {"name": "secret", "mountPath": "/etc/secret"},
                                {"name": "config", "mountPath": "/etc/config"},
                                {"name": "scratch", "mountPath": "/scratch"},
                                {"name": "data", "mountPath": "/data"},
                                {"name": "token", "mountPath": "/var/run/secrets/burrito-py"}]}],
            "volumes": [
                {"name": "secret", "secret": {"secretName": "s", "defaultMode": 0o400,
                                              "items": [{"key": "pw", "path": "nested/password"}]}},
                {"name": "config", "configMap": {"name": "c", "items": [{"key": "mode", "path": "speed"}]}},
                {"name": "scratch", "emptyDir": {}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "token", "projected": {"sources": [{"serviceAccountToken": {
                    "audience": "burrito-py", "expirationSeconds": 600, "path": "token"}}]}}]}}}}
    assert http.post(f"/apis/apps/v1/namespaces/{ns}/deployments", json=deployment).status_code == 201
    pod = wait_for(lambda: (running(http, ns, 1) or [None])[0], 30, 0.05, "the pod to run")
    root = cluster.kubelet.pod_root(ns, pod["metadata"]["name"])
    visits = root / "data" / "visits"
    wait_for(lambda: visits.exists() and (root / "scratch" / "x").exists(), 10, 0.05, "the process to write")
    secret = root / "etc" / "secret" / "nested" / "password"
    assert secret.read_text() == "hunter2" and oct(secret.stat().st_mode & 0o777) == "0o400"
    assert not (root / "etc" / "secret" / "other").exists()
    assert (root / "etc" / "config" / "speed").read_text() == "fast"
    sa = root / "var" / "run" / "secrets" / "kubernetes.io" / "serviceaccount"
    assert (sa / "namespace").read_text() == ns and (sa / "token").read_text().count(".") == 2

    token_file = root / "var" / "run" / "secrets" / "burrito-py" / "token"
    first_token = token_file.read_text()
    wait_for(lambda: token_file.read_text() not in ("", first_token), 10, 0.05, "the token to be renewed")
    review = http.post("/apis/authentication.k8s.io/v1/tokenreviews", json={
        "spec": {"token": token_file.read_text(), "audiences": ["burrito-py"]}}).json()["status"]
    assert review["authenticated"] and review["user"]["username"] == f"system:serviceaccount:{ns}:default"

    http.delete(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}")
    replacement = wait_for(lambda: [p for p in (running(http, ns, 1) or [])
                                    if p["metadata"]["name"] != pod["metadata"]["name"]], 30, 0.05)[0]
    new_root = cluster.kubelet.pod_root(ns, replacement["metadata"]["name"])
    wait_for(lambda: len((new_root / "data" / "visits").read_text().splitlines()) == 2, 10, 0.05,
             "the new pod to see the claim's data")
    assert (new_root / "data" / "visits").read_text().splitlines() == [pod["metadata"]["name"],
                                                                       replacement["metadata"]["name"]]
    assert (new_root / "scratch").resolve() != (root / "scratch").resolve(), "an emptyDir is the pod's own"
    wait_for(lambda: not (root / "scratch" / "x").exists(), 10, 0.05, "the deleted pod's emptyDir to go")


def test_crash_loop_back_off_and_liveness_restarts(cluster: LocalCluster, http: httpx.Client) -> None:
    ns = namespace(http, "crashy")

    def bare(name: str, code: str, **container: Any) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"terminationGracePeriodSeconds": 1, "containers": [
            {"name": "main", "image": "x", "command": [sys.executable, "-c", code], **container}]}}

    http.post(f"/api/v1/namespaces/{ns}/pods", json=bare("crash", "import sys; sys.exit(3)"))
    http.post(f"/api/v1/namespaces/{ns}/pods", json=bare("unhealthy", "import time; time.sleep(3600)", livenessProbe={
        "tcpSocket": {"port": 9}, "periodSeconds": 1, "failureThreshold": 2}))
    seen: set[str] = set()

    def crash_looping() -> dict[str, Any] | None:
        status = http.get(f"/api/v1/namespaces/{ns}/pods/crash").json()["status"]
        container = (status.get("containerStatuses") or [{}])[0]
        seen.add(str((container.get("state") or {}).get("waiting", {}).get("reason")))
        return container if container.get("restartCount", 0) >= 2 else None

    container = wait_for(crash_looping, 30, 0.01, "the crashing container to restart twice")
    assert "CrashLoopBackOff" in seen
    assert container["lastState"]["terminated"]["exitCode"] == 3
    assert http.get(f"/api/v1/namespaces/{ns}/pods/crash").json()["status"]["phase"] == "Running"

    def killed_by_liveness() -> dict[str, Any] | None:
        status = http.get(f"/api/v1/namespaces/{ns}/pods/unhealthy").json()["status"]
        found = (status.get("containerStatuses") or [{}])[0]
        return found if found.get("restartCount", 0) >= 1 else None

    restarted = wait_for(killed_by_liveness, 30, 0.05, "the liveness probe to restart the container")
    assert restarted["lastState"]["terminated"]["exitCode"] == 128 + signal.SIGTERM


def test_a_token_renewal_whose_connection_is_lost_is_asked_again(cluster: LocalCluster, http: httpx.Client) -> None:
    """A renewal that failed on its way (a reset) ended the pod's token refresher with nothing logged: the token
    was never renewed again and expired under the running pod. The kubelet asks again 5 s later."""
    ns = namespace(http, "renewals")
    pod = {"metadata": {"name": "holder"}, "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                                                     "automountServiceAccountToken": False, "containers": [{
        "name": "main", "image": "x", "command": [sys.executable, "-c", "import time; time.sleep(3600)"],
        "volumeMounts": [{"name": "token", "mountPath": "/var/run/secrets/burrito-py"}]}],
        "volumes": [{"name": "token", "projected": {"sources": [{"serviceAccountToken": {
            "audience": "burrito-py", "expirationSeconds": 600, "path": "token"}}]}}]}}
    assert http.post(f"/api/v1/namespaces/{ns}/pods", json=pod).status_code == 201
    token_file = cluster.kubelet.pod_root(ns, "holder") / "var" / "run" / "secrets" / "burrito-py" / "token"
    wait_for(lambda: token_file.exists() and token_file.read_text() != "", 30, 0.05, "the first token")
    cluster.api.inject_fault("POST", rf"/namespaces/{ns}/serviceaccounts/default/token$", drop=True, times=3)
    first = token_file.read_text()
    wait_for(lambda: token_file.read_text() != first, 30, 0.05, "the token renewed after the lost requests")
    review = http.post("/apis/authentication.k8s.io/v1/tokenreviews", json={
        "spec": {"token": token_file.read_text(), "audiences": ["burrito-py"]}}).json()["status"]
    assert review["authenticated"]
    asked = [r for r in cluster.api.requests
             if r.method == "POST" and r.path.endswith(f"{ns}/serviceaccounts/default/token")]
    assert len(asked) >= 5  # the first token, three renewals lost, one heard
