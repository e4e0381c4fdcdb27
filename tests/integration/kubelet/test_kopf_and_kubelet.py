"""kopf (KopfRunner) and the local kubelet against the emulator: an operator creates a Pod, the
kubelet runs it to completion; plus the kubelet's own behaviours."""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.kubelet import LocalKubelet
from kopf.testing import KopfRunner

from tests.support.emulator import wait_for, watching

PODS = "/api/v1/namespaces/default/pods"
OPERATOR = textwrap.dedent('''
    import kopf

    @kopf.on.create("", "v1", "configmaps")
    def create_pod(body, **_):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": body["metadata"]["name"] + "-job"},
               "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "none",
                        "command": ["python3", "-c", "print('done by ' + '" + body["metadata"]["name"] + "')"]}]}}
        kopf.adopt(pod)
        import kubernetes
        kubernetes.config.load_kube_config()
        kubernetes.client.CoreV1Api().create_namespaced_pod("default", pod)
        return {"created": pod["metadata"]["name"]}
''')


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ApiServer, httpx.Client, Path]]:
    from tests.conftest import KUBECONFIG_PATH  # the path $KUBECONFIG points at for this process

    server = ApiServer(pod_log_dir=tmp_path / "logs").start()
    kubeconfig = server.write_kubeconfig(KUBECONFIG_PATH)
    kubelet = LocalKubelet(kubeconfig, tmp_path / "logs", tmp_path / "pods", grace_seconds=1)
    kubelet.start()
    with httpx.Client(base_url=server.url, timeout=10, headers=server.admin_headers) as http:
        yield server, http, tmp_path
    kubelet.stop()
    server.stop()


def phase(http: httpx.Client, name: str) -> str | None:
    response = http.get(f"{PODS}/{name}")
    return (response.json().get("status") or {}).get("phase") if response.status_code == 200 else None


def test_a_kopf_operator_creates_a_pod_that_the_kubelet_runs(cluster: tuple[ApiServer, httpx.Client, Path]):
    server, http, tmp = cluster
    operator = tmp / "operator.py"
    operator.write_text(OPERATOR)
    with KopfRunner(["run", "--standalone", "-A", "--verbose", str(operator)]) as runner:
        wait_for(lambda: watching(server, "configmaps"), 30)
        http.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "hello"}})
        wait_for(lambda: phase(http, "hello-job") == "Succeeded", 30)
        assert http.get(f"{PODS}/hello-job/log").text == "done by hello\n"
        owner = http.get(f"{PODS}/hello-job").json()["metadata"]["ownerReferences"][0]
        assert owner["name"] == "hello"
        # A ConfigMap has no `status` (kube-apiserver drops kopf's handler results there, and so does the
        # emulator): the handler is done when kopf records the handled state in its annotation.
        wait_for(lambda: "kopf.zalando.org/last-handled-configuration" in (
            http.get("/api/v1/namespaces/default/configmaps/hello").json()["metadata"].get("annotations") or {}), 30)
    assert runner.exit_code == 0, runner.output
    creates = [r for r in server.requests if r.method == "POST" and r.path == PODS]
    assert len(creates) == 1, "the handler ran exactly once"


def pod(name: str, code: str, **container: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "none", "command": [sys.executable, "-c", code], **container}]}}


def test_failing_command_reports_its_exit_code_and_termination_message(cluster: tuple[ApiServer, httpx.Client, Path]):
    _, http, _ = cluster
    code = "import os,sys; open(os.environ['BURRITO_LOCAL_ROOT']+'/dev/termination-log','w').write('why'); sys.exit(3)"
    http.post(PODS, json=pod("fail", code))
    wait_for(lambda: phase(http, "fail") == "Failed", 30)
    terminated = http.get(f"{PODS}/fail").json()["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (3, "Error", "why")


def test_env_from_secrets_and_configmaps_and_projected_tokens(cluster: tuple[ApiServer, httpx.Client, Path]):
    _, http, _ = cluster
    http.post("/api/v1/namespaces/default/secrets", json={"metadata": {"name": "s"}, "data": {"pw": "aHVudGVyMg=="}})
    http.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "c"}, "data": {"mode": "fast"}})
    code = ("import os; root=os.environ['BURRITO_LOCAL_ROOT']; "
            "print(os.environ['PW'], os.environ['CFG_mode'], len(open(root+'/var/run/t/token').read()) > 20)")
    body = pod("env", code, env=[{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}}],
               envFrom=[{"configMapRef": {"name": "c"}, "prefix": "CFG_"}],
               volumeMounts=[{"name": "t", "mountPath": "/var/run/t"}])
    body["spec"]["volumes"] = [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {
        "audience": "burrito-py", "path": "token"}}]}}]
    http.post(PODS, json=body)
    wait_for(lambda: phase(http, "env") == "Succeeded", 30)
    assert http.get(f"{PODS}/env/log").text == "hunter2 fast True\n"


def test_deleting_a_pod_stops_its_process(cluster: tuple[ApiServer, httpx.Client, Path]):
    _, http, tmp = cluster
    marker = tmp / "still-running"
    http.post(PODS, json=pod("sleeper", f"import time,pathlib\nwhile True: pathlib.Path({str(marker)!r}).touch(); "
                                        "time.sleep(0.05)"))
    wait_for(lambda: phase(http, "sleeper") == "Running" and marker.exists(), 30)
    http.delete(f"{PODS}/sleeper")
    time.sleep(0.3)
    marker.unlink(missing_ok=True)
    time.sleep(0.5)
    assert not marker.exists(), "the process kept running after its pod was deleted"


def test_a_missing_command_fails_the_pod(cluster: tuple[ApiServer, httpx.Client, Path]):
    _, http, _ = cluster
    body = pod("nocmd", "")
    body["spec"]["containers"][0]["command"] = ["/nonexistent/binary"]
    http.post(PODS, json=body)
    wait_for(lambda: phase(http, "nocmd") == "Failed", 30)
    terminated = http.get(f"{PODS}/nocmd").json()["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 128 and terminated["reason"] == "StartError"
