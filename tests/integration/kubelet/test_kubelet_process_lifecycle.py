"""The local kubelet ends a pod as a node does: the container's whole process tree goes with its main
process, a status write the API lost is retried, a SIGKILLed container reads 137/Error, and every pod
(even one recreated under the same name) starts with its own empty /tmp and its own log."""

from __future__ import annotations

import logging
import os
import re
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

from tests.support.emulator import wait_for

PODS = "/api/v1/namespaces/default/pods"


class Node:
    def __init__(self, server: ApiServer, kubelet: LocalKubelet, http: httpx.Client, tmp: Path) -> None:
        self.server, self.kubelet, self.http, self.tmp = server, kubelet, http, tmp

    def pod(self, name: str) -> dict[str, Any]:
        response = self.http.get(f"{PODS}/{name}")
        return response.json() if response.status_code == 200 else {}

    def phase(self, name: str) -> str | None:
        return (self.pod(name).get("status") or {}).get("phase")

    def run(self, name: str, code: str, restart: str = "Never", **spec: Any) -> None:
        body = {"metadata": {"name": name}, "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 1,
                                                     "containers": [{"name": "main", "image": "none", "command": [
                                                         sys.executable, "-c", textwrap.dedent(code)]}], **spec}}
        assert self.http.post(PODS, json=body).status_code == 201


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    from tests.conftest import KUBECONFIG_PATH

    server = ApiServer(pod_log_dir=tmp_path / "logs").start()
    kubeconfig = server.write_kubeconfig(KUBECONFIG_PATH)
    kubelet = LocalKubelet(kubeconfig, tmp_path / "logs", tmp_path / "pods", grace_seconds=2)
    kubelet.start()
    with httpx.Client(base_url=server.url, timeout=10, headers=server.admin_headers) as http:
        yield Node(server, kubelet, http, tmp_path)
    kubelet.stop()
    server.stop()


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (an orphan its new parent has not reaped yet is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


# The child ignores SIGTERM and says so (its pid in the file) only once it does.
CHILD = """
    import pathlib, subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", "import os, pathlib, signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); pathlib.Path({pidfile!r}).write_text(str(os.getpid())); "
        "time.sleep(600)"])
    while not pathlib.Path({pidfile!r}).exists():
        time.sleep(0.01)
"""


def test_the_pods_process_group_ends_with_its_main_process(node: Node) -> None:
    """An orphaned child (a `terraform apply` under the runner) must not outlive the container: on a node
    the container's PID namespace goes with its main process."""
    pidfile = node.tmp / "child.pid"
    node.run("parent", CHILD.format(pidfile=str(pidfile)) + "\n    print('main done')\n")
    wait_for(lambda: node.phase("parent") == "Succeeded", 30, 0.02, "the pod to succeed")
    child = int(pidfile.read_text())
    assert not alive(child), "the child outlived its pod's main process"


def test_deleting_a_pod_kills_children_that_ignore_sigterm(node: Node) -> None:
    pidfile = node.tmp / "stubborn.pid"
    node.run("stubborn", CHILD.format(pidfile=str(pidfile)) + "\n    time.sleep(600)\n")
    wait_for(lambda: pidfile.exists() and pidfile.read_text(), 30, 0.02, "the child to start")
    child = int(pidfile.read_text())
    assert alive(child)
    assert node.http.delete(f"{PODS}/stubborn").status_code == 200
    # main exits on SIGTERM at once; the child ignores it and must get SIGKILL after the grace period.
    wait_for(lambda: not alive(child), 10, 0.05, "the child to be killed with its pod")


GATED = """
    import os, pathlib, time
    gate = pathlib.Path({gate!r})
    while not gate.exists():
        time.sleep(0.02)
    print("finished")
"""


@pytest.mark.parametrize("after", [False, True], ids=["refused", "response-lost"])
def test_a_failed_status_update_is_retried_not_dropped(node: Node, after: bool) -> None:
    """A lost `Succeeded` left a pod, its run and its layer Running forever: the kubelet retries."""
    gate = node.tmp / "go"
    node.run("gated", GATED.format(gate=str(gate)))
    wait_for(lambda: node.phase("gated") == "Running", 30, 0.02, "the pod to run")
    node.server.inject_fault("PATCH", r"/pods/gated/status$", status=500, times=3, after=after)
    node.server.inject_fault("PUT", r"/pods/gated/status$", status=500, times=3, after=after)
    before = len(node.server.requests)
    gate.touch()
    wait_for(lambda: node.phase("gated") == "Succeeded", 20, 0.05, "the Succeeded status to arrive")

    def writes() -> int:
        return len([r for r in node.server.requests[before:]
                    if r.path == f"{PODS}/gated/status" and r.method in ("PATCH", "PUT")])

    # Three failed answers (the write refused, or carried out and its answer lost), then one that is heard.
    wait_for(lambda: writes() >= 4, 20, 0.05, "the kubelet to retry until a write is acknowledged")
    time.sleep(0.3)
    assert writes() == 4
    terminated = node.pod("gated")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")


@pytest.mark.parametrize("path", [r"/secrets/db$", r"/serviceaccounts/default/token$"], ids=["secret", "token"])
def test_a_connection_lost_while_a_pod_is_set_up_is_retried_and_the_pod_starts(node: Node, path: str) -> None:
    """A reset while the kubelet read a pod's Secret (or asked for its token) ended the task starting the pod,
    with nothing logged: the pod stayed Pending for good (an e2e run's plan hung so). The kubelet asks again."""
    secret = {"metadata": {"name": "db"}, "stringData": {"password": "s3cret"}}
    assert node.http.post("/api/v1/namespaces/default/secrets", json=secret).status_code == 201
    node.server.inject_fault("*", path, drop=True, times=2)
    pod = {"metadata": {"name": "configured"}, "spec": {"restartPolicy": "Never", "containers": [{
        "name": "main", "image": "none", "command": [sys.executable, "-c", "import os; print(os.environ['PASSWORD'])"],
        "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}]}}
    assert node.http.post(PODS, json=pod).status_code == 201
    wait_for(lambda: node.phase("configured") == "Succeeded", 30, 0.05, "the pod to start and succeed")
    dropped = [r for r in node.server.requests if re.search(path, r.path)]
    assert len(dropped) >= 3  # two connections lost, then the answer
    assert (node.tmp / "logs" / "default" / "configured" / "main.log").read_text() == "s3cret\n"


@pytest.mark.parametrize("status", [403, 429, 500])
def test_a_token_request_refused_for_a_while_is_asked_again_and_the_pod_starts(node: Node, status: int) -> None:
    """Refused, not lost: on a real control plane the node authorizer's graph may not know a pod's binding yet
    (403), API priority and fairness may shed the call (429). The kubelet gave up on the pod, which stayed Pending
    for good (a CI run's apply pod, so its layer stayed Running): a node asks again while the pod is its."""
    node.server.inject_fault("POST", r"/serviceaccounts/default/token$", status=status, times=2)
    node.run("tokened", "print('started')")
    wait_for(lambda: node.phase("tokened") == "Succeeded", 30, 0.05, "the pod to start and succeed")
    asked = [r for r in node.server.requests if r.path.endswith("/serviceaccounts/default/token")]
    assert len(asked) >= 3  # refused twice, then issued
    assert (node.tmp / "logs" / "default" / "tokened" / "main.log").read_text() == "started\n"


def test_a_pod_deleted_while_its_token_is_refused_is_not_started(node: Node,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """The asking again ends with the pod: deleted, it is given up (and never started)."""
    caplog.set_level(logging.INFO, logger="burrito_local.kubelet")
    node.server.inject_fault("POST", r"/serviceaccounts/default/token$", status=403, times=1000)
    node.run("refused", "print('started')")
    wait_for(lambda: any(r.path.endswith("/serviceaccounts/default/token") for r in node.server.requests), 30,
             0.05, "the kubelet to ask for the pod's token")
    assert node.http.delete(f"{PODS}/refused").status_code == 200
    wait_for(lambda: any("pod default/refused not started" in r.getMessage() for r in caplog.records), 30, 0.05,
             "the kubelet to give the deleted pod up")
    # The pod was bound, so its deletion is graceful: the API removes it once the kubelet confirms (a moment
    # after the log line above), as on a real node.
    wait_for(lambda: not node.pod("refused"), 30, 0.05, "the deleted pod to be gone")
    assert not (node.tmp / "logs" / "default" / "refused" / "main.log").exists()


def test_a_sigkilled_container_reports_137_and_error(node: Node) -> None:
    node.run("killed", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    wait_for(lambda: node.phase("killed") == "Failed", 30, 0.02, "the pod to fail")
    terminated = node.pod("killed")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "Error")


def test_a_restarted_container_killed_by_sigkill_shows_137_in_last_state(node: Node) -> None:
    node.run("crashy", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", restart="Always")

    def last() -> dict[str, Any] | None:
        statuses = (node.pod("crashy").get("status") or {}).get("containerStatuses") or [{}]
        return (statuses[0].get("lastState") or {}).get("terminated")

    terminated = wait_for(last, 30, 0.02, "the container to be restarted")
    assert (terminated["exitCode"], terminated["reason"]) == (137, "Error")


TMP_USER = """
    import os, pathlib, tempfile
    tmp = os.environ["TMPDIR"]
    print(tmp.startswith(os.environ["BURRITO_LOCAL_ROOT"] + "/"), sorted(os.listdir(tmp)))
    pathlib.Path(tmp, "leftover").write_text("from an earlier pod")
    tempfile.NamedTemporaryFile(delete=False).close()
"""


def test_each_pod_gets_its_own_empty_tmp_and_log_even_under_a_reused_name(node: Node) -> None:
    node.run("tmp-user", TMP_USER)
    wait_for(lambda: node.phase("tmp-user") == "Succeeded", 30, 0.02)
    assert node.http.get(f"{PODS}/tmp-user/log").text == "True []\n"
    first_root = node.kubelet.pod_root("default", "tmp-user")
    assert (first_root / "tmp" / "leftover").exists(), "TMPDIR is the pod's /tmp, under its root"
    node.run("other", TMP_USER)  # a pod running beside it has its own /tmp
    wait_for(lambda: node.phase("other") == "Succeeded", 30, 0.02)
    assert node.http.get(f"{PODS}/other/log").text == "True []\n"

    assert node.http.delete(f"{PODS}/tmp-user").status_code == 200
    wait_for(lambda: not (first_root / "tmp" / "leftover").exists(), 10, 0.02, "the deleted pod's /tmp to go")
    node.run("tmp-user", TMP_USER)  # a new pod under the same name: a new container filesystem
    wait_for(lambda: node.phase("tmp-user") == "Succeeded", 30, 0.02)
    assert node.http.get(f"{PODS}/tmp-user/log").text == "True []\n", "a new pod's log holds only its own output"


def test_a_pod_recreated_at_once_under_its_name_keeps_its_files(node: Node) -> None:
    """The cleanup of a deleted pod must not remove the files of its successor of the same name. Force-deleted
    (a grace period of 0, `kubectl delete --force`), so the name is free at once while the kubelet still stops
    the old pod's process and removes its files."""
    code = """
        import os, pathlib, time
        pathlib.Path(os.environ["TMPDIR"], "mine").write_text(os.environ["HOSTNAME"])
        time.sleep(600)
    """
    node.run("again", code)
    root = node.kubelet.pod_root("default", "again")
    wait_for(lambda: (root / "tmp" / "mine").exists(), 30, 0.02)
    for _ in range(3):
        assert node.http.delete(f"{PODS}/again", params={"gracePeriodSeconds": "0"}).status_code == 200
        node.run("again", code)
    uid = node.pod("again")["metadata"]["uid"]
    wait_for(lambda: node.phase("again") == "Running", 30, 0.02)
    time.sleep(0.5)  # the deleted pods' cleanups have run
    wait_for(lambda: (root / "tmp" / "mine").exists(), 10, 0.02, "the live pod's /tmp to hold its file")
    assert node.pod("again")["metadata"]["uid"] == uid


# As the runner starts terraform (runner/terraform.py: `process_group=0`): a process group of its own, so that a
# terminal's Ctrl-C or a killpg of the runner's group never reaches it directly. It ignores SIGTERM here.
OWN_GROUP = """
    import pathlib, subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", "import os, pathlib, signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); pathlib.Path({pidfile!r}).write_text(str(os.getpid())); "
        "time.sleep(600)"], process_group=0)
    while not pathlib.Path({pidfile!r}).exists():
        time.sleep(0.01)
"""


def test_a_child_in_a_process_group_of_its_own_goes_with_a_killed_container(node: Node) -> None:
    """Issue 25 item 6: terraform, started by the runner in its own process group, outlived a runner killed under
    the local kubelet (which killed the runner's group only), and the next attempt ran a second terraform apply
    on the same state. The container's whole session goes now, as its PID namespace would."""
    pidfile = node.tmp / "terraform.pid"
    node.run("runner", OWN_GROUP.format(pidfile=str(pidfile)) + "\n    import os, signal\n"
                                                                 "    os.kill(os.getpid(), signal.SIGKILL)\n")
    wait_for(lambda: node.phase("runner") == "Failed", 30, 0.02, "the killed runner's pod to fail")
    child = int(pidfile.read_text())
    assert not alive(child), "terraform outlived its killed runner"
    terminated = node.pod("runner")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 137


def test_deleting_a_pod_ends_a_child_in_a_process_group_of_its_own(node: Node) -> None:
    pidfile = node.tmp / "terraform-2.pid"
    node.run("deleted", OWN_GROUP.format(pidfile=str(pidfile)) + "\n    time.sleep(600)\n")
    wait_for(lambda: pidfile.exists() and pidfile.read_text(), 30, 0.02, "the child to start")
    child = int(pidfile.read_text())
    assert alive(child) and os.getpgid(child) == child, "it runs in a process group of its own"
    assert node.http.delete(f"{PODS}/deleted").status_code == 200
    wait_for(lambda: not alive(child), 15, 0.05, "the child to be killed with its pod")
