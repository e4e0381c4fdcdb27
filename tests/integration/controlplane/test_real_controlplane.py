"""The real control plane (controlplane/ + local/burrito_local/controlplane.py): what the emulator only imitates,
checked against kube-apiserver, kube-controller-manager and kube-scheduler themselves."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
import yaml
from burrito_local.controlplane import ControlPlane, ControlPlaneConfig, ControlPlaneError

from burrito_py.api import annotations as ann
from burrito_py.chart.admission_policy import (
    MESSAGE,
    OPERATION_BY_MESSAGE,
    OPERATION_RUN_MESSAGE,
    policy_objects,
)
from tests.support.controlplane import (
    apply,
    eventually,
    kubectl,
    kubectl_json,
    read_crds,
    unique_namespace,
    wait_established,
)

ROOT = Path(__file__).resolve().parents[3]
VIEWER = "system:serviceaccount:default:viewer"


def test_ready_and_serving_the_pinned_version(controlplane: ControlPlane) -> None:
    assert kubectl(controlplane, "get", "--raw", "/readyz").stdout.strip() == "ok"
    verbose = kubectl(controlplane, "get", "--raw", "/readyz?verbose").stdout
    assert "[+]etcd ok" in verbose and "[+]poststarthook/rbac/bootstrap-roles ok" in verbose
    version = json.loads(kubectl(controlplane, "get", "--raw", "/version").stdout)
    assert version["gitVersion"].startswith("v1.37.") and version["major"] == "1" and version["minor"] == "37"
    # The controller manager ran: every namespace has its ServiceAccount and the root CA ConfigMap.
    assert kubectl_json(controlplane, "get", "configmap", "kube-root-ca.crt", "-n", "default")["data"]["ca.crt"]
    classes = kubectl_json(controlplane, "get", "storageclasses")["items"]
    default = "storageclass.kubernetes.io/is-default-class"
    assert [c["metadata"]["name"] for c in classes if c["metadata"]["annotations"].get(default) == "true"] == [
        "standard"]


def test_the_crds_are_served_and_validated(controlplane: ControlPlane) -> None:
    kubectl(controlplane, "apply", "--server-side", *[f"--filename={p}" for p in read_crds(ROOT)])
    names = [yaml.safe_load(p.read_text())["metadata"]["name"] for p in read_crds(ROOT)]
    wait_established(controlplane, *names)
    namespace = unique_namespace(controlplane)
    run = {"apiVersion": ann.API_VERSION, "kind": "TerraformRun", "metadata": {"name": "r1", "namespace": namespace},
           "spec": {"action": "plan", "layer": {"name": "l1", "revision": "0" * 40}}}
    apply(controlplane, run)
    served = kubectl_json(controlplane, "get", "terraformruns", "-n", namespace, "r1")
    assert served["spec"]["action"] == "plan"
    # The structural schema is enforced by kube-apiserver itself: a wrong type is a 422 naming the field.
    bad = {**run, "metadata": {"name": "r2", "namespace": namespace}, "spec": {**run["spec"], "action": 7}}
    refused = kubectl(controlplane, "apply", "-f", "-", stdin=json.dumps(bad), check=False)
    assert refused.returncode != 0 and "spec.action" in refused.stderr


def test_the_charts_admission_policy_is_enforced(controlplane: ControlPlane) -> None:
    kubectl(controlplane, "apply", "--server-side", *[f"--filename={p}" for p in read_crds(ROOT)])
    wait_established(controlplane, "terraformruns.terraform.burrito-py.io")
    namespace = unique_namespace(controlplane)
    # Bound to this test's namespace only and deleted after it: the session's control plane is shared with
    # tests/e2e/, whose controllers (another identity than this policy's controllers) write runs and layers.
    policies = policy_objects("vap-test", ["system:serviceaccount:x:server"], "runner",
                              ["system:serviceaccount:x:controllers"])
    for obj in policies:
        if obj["kind"] == "ValidatingAdmissionPolicyBinding":
            obj["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": namespace}}}
    try:
        apply(controlplane, *policies)
        _the_policies_refuse(controlplane, namespace)
    finally:
        for obj in policies:
            kubectl(controlplane, "delete", obj["kind"].lower(), obj["metadata"]["name"], "--ignore-not-found")


def _the_policies_refuse(controlplane: ControlPlane, namespace: str) -> None:
    forged = {"apiVersion": ann.API_VERSION, "kind": "TerraformRun",
              "metadata": {"name": "forged", "namespace": namespace},
              "spec": {"action": "apply", "layer": {"name": "victim", "namespace": "default", "revision": "0" * 40}}}

    def refused() -> str:
        # The policy is enforced once kube-apiserver's policy informer has seen it and its binding.
        result = kubectl(controlplane, "create", "-f", "-", stdin=json.dumps(forged), check=False)
        if result.returncode == 0:
            kubectl(controlplane, "delete", "terraformrun", "forged", "-n", namespace)
            return ""
        return result.stderr

    message = eventually(refused, what="the ValidatingAdmissionPolicy to be enforced")
    assert ("ValidatingAdmissionPolicy 'vap-test-run-namespace' with binding 'vap-test-run-namespace' denied "
            f"request: {MESSAGE}") in message
    own = {**forged, "metadata": {"name": "own", "namespace": namespace},
           "spec": {**forged["spec"], "layer": {**forged["spec"]["layer"], "namespace": namespace}}}
    kubectl(controlplane, "create", "-f", "-", stdin=json.dumps(own))
    # A day-2 operation's run (§5.12) is the controllers' to write: kube-apiserver compiles and enforces the rule.
    operation = {**own, "metadata": {"name": "op", "namespace": namespace},
                 "spec": {"action": "state-rm", "layer": own["spec"]["layer"],
                          "operation": {"requestedBy": "someone-else", "address": "aws_s3_bucket.logs"}}}
    result = kubectl(controlplane, "create", "-f", "-", stdin=json.dumps(operation), check=False)
    assert result.returncode != 0 and OPERATION_RUN_MESSAGE in result.stderr, result.stderr
    # The layer policy compiles too: an annotation naming another user is refused, one's own name is not.
    layer = {"apiVersion": ann.API_VERSION, "kind": "TerraformLayer", "metadata": {
        "name": "app", "namespace": namespace, "annotations": {
            ann.OPERATION: '{"operation": "state-rm", "address": "a.b"}', ann.OPERATION_BY: "someone-else"}},
        "spec": {"repository": {"name": "r"}, "branch": "main", "path": "."}}

    def layer_refused() -> str:
        # Each policy is enforced once kube-apiserver's informer has seen it and its binding: the run policy's
        # being enforced says nothing of the layer policy's (the suite once created this layer before it was).
        result = kubectl(controlplane, "create", "-f", "-", stdin=json.dumps(layer), check=False)
        if result.returncode == 0:
            kubectl(controlplane, "delete", "terraformlayer", "app", "-n", namespace)
            return ""
        return result.stderr

    assert OPERATION_BY_MESSAGE in eventually(layer_refused, what="the layer policy to be enforced")
    whoami = kubectl_json(controlplane, "auth", "whoami", "-o", "json")["status"]["userInfo"]["username"]
    layer["metadata"]["annotations"][ann.OPERATION_BY] = whoami
    kubectl(controlplane, "create", "-f", "-", stdin=json.dumps(layer))


def test_rbac_with_real_impersonation(controlplane: ControlPlane) -> None:
    """`kubectl --as` impersonates for real (the emulator ignores it and answers as the caller)."""
    apply(controlplane,
          {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "viewer", "namespace": "default"}},
          {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": "viewer-view", "namespace": "default"},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
           "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": "default"}]})

    def can(*args: str, namespace: str = "default") -> str:
        result = kubectl(controlplane, "auth", "can-i", *args, "--as", VIEWER, "-n", namespace, check=False)
        return result.stdout.strip()

    assert eventually(lambda: can("get", "pods") == "yes", what="the RoleBinding to apply")
    assert can("create", "pods") == "no"
    assert can("get", "secrets") == "no"  # `view` never reads Secrets
    assert can("get", "pods", namespace="kube-system") == "no"
    # The admin itself may, so a "no" above is the impersonated user's answer, not the caller's.
    assert kubectl(controlplane, "auth", "can-i", "create", "pods").stdout.strip() == "yes"
    denied = kubectl(controlplane, "get", "secrets", "-n", "default", "--as", VIEWER, check=False)
    assert denied.returncode != 0
    assert f'User "{VIEWER}" cannot list resource "secrets"' in denied.stderr


def test_garbage_collection_through_owner_references(controlplane: ControlPlane) -> None:
    namespace = unique_namespace(controlplane)
    apply(controlplane,
          {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": namespace}})
    owner = kubectl_json(controlplane, "get", "configmap", "owner", "-n", namespace)
    apply(controlplane, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "child", "namespace": namespace,
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                             "uid": owner["metadata"]["uid"]}]}})
    kubectl(controlplane, "delete", "configmap", "owner", "-n", namespace, "--wait=false")

    def child_gone() -> bool:
        return kubectl(controlplane, "get", "configmap", "child", "-n", namespace, check=False).returncode != 0

    eventually(child_gone, what="the garbage collector to delete the dependent")


def test_a_deployment_makes_a_replicaset_and_a_claim_binds(controlplane: ControlPlane) -> None:
    namespace = unique_namespace(controlplane)
    labels = {"app": "web"}
    apply(controlplane,
          {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": namespace},
           "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
               "metadata": {"labels": labels},
               # Scheduled nowhere, as on a control plane without nodes: the session's may have tests/e2e/'s
               # local kubelet as a Node, which would try to run this image.
               "spec": {"nodeSelector": {"burrito-py.io/no-such-node": "true"},
                        "containers": [{"name": "web", "image": "example.invalid/web:1"}]}}}},
          {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": namespace},
           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    deployment = kubectl_json(controlplane, "get", "deployment", "web", "-n", namespace)

    def replicaset() -> dict[str, object] | None:
        items = kubectl_json(controlplane, "get", "replicasets", "-n", namespace)["items"]
        return items[0] if items else None

    rs = eventually(replicaset, what="the deployment controller's ReplicaSet")
    assert rs["metadata"]["ownerReferences"][0]["uid"] == deployment["metadata"]["uid"]  # type: ignore[index]

    def pods() -> list[dict[str, object]]:
        items: list[dict[str, object]] = kubectl_json(controlplane, "get", "pods", "-n", namespace)["items"]
        return items if len(items) == 2 else []

    for pod in eventually(pods, what="the ReplicaSet's two pods"):
        assert pod["metadata"]["ownerReferences"][0]["uid"] == rs["metadata"]["uid"]  # type: ignore[index]
    # The claim got the default StorageClass (admission) and a volume from the hostPath provisioner.
    claim = eventually(lambda: (c := kubectl_json(controlplane, "get", "pvc", "data", "-n", namespace))
                       ["status"].get("phase") == "Bound" and c, what="the claim to bind")
    assert claim["spec"]["storageClassName"] == "standard"


# -- failures: one clear line each ------------------------------------------------------------------
def test_a_second_control_plane_on_the_same_data_directory_is_refused(controlplane: ControlPlane) -> None:
    kubeconfig_before = controlplane.kubeconfig.read_bytes()
    second = ControlPlane(controlplane.binary, ControlPlaneConfig(controlplane.data_dir))
    with pytest.raises(ControlPlaneError) as refused:
        second.start()
    assert str(refused.value) == (f"data directory {controlplane.data_dir} is in use by another control plane "
                                  f"(pid {controlplane.process.pid if controlplane.process else '?'})")
    assert controlplane.kubeconfig.read_bytes() == kubeconfig_before  # nothing of the running one was touched
    assert kubectl(controlplane, "get", "--raw", "/readyz").stdout.strip() == "ok"


def test_a_port_in_use_is_one_clear_line(controlplane: ControlPlane, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        plane = ControlPlane(controlplane.binary, ControlPlaneConfig(tmp_path / "cp", api_port=port))
        with pytest.raises(ControlPlaneError) as refused:
            plane.start()
    assert f"controlplane: port 127.0.0.1:{port} (kube-apiserver) is in use" in str(refused.value)


@pytest.mark.slow
def test_a_picked_port_taken_before_the_binary_listens_is_picked_again(
        controlplane: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # On a busy machine a port found free can be taken (by any outgoing connection) before the binary listens
    # on it: CI once lost a whole worker's control plane to its etcd client port. The first pick here is a port
    # already taken; the start must pick again rather than fail.
    import burrito_local.controlplane as module
    real_free_port, handed = module.free_port, []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        def first_one_taken(host: str = "127.0.0.1") -> int:
            handed.append(port if not handed else real_free_port(host))
            return handed[-1]

        monkeypatch.setattr(module, "free_port", first_one_taken)
        plane = ControlPlane(controlplane.binary, ControlPlaneConfig(tmp_path / "cp", unsafe_no_fsync=True)).start()
        try:
            assert plane.config.api_port != port and handed[0] == port and len(handed) == 6
            assert f"controlplane: port 127.0.0.1:{port} (kube-apiserver) is in use" in plane.log_path.read_text()
            assert kubectl(plane, "get", "--raw", "/readyz").stdout.strip() == "ok"
        finally:
            plane.stop()


@pytest.mark.slow
def test_a_killed_control_plane_is_reported_and_its_data_directory_recovered(
        controlplane: ControlPlane, tmp_path: Path) -> None:
    config = ControlPlaneConfig(tmp_path / "cp", unsafe_no_fsync=True)
    plane = ControlPlane(controlplane.binary, config).start()
    try:
        apply(plane, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept", "namespace": "default"}})
        assert plane.process is not None
        os.killpg(plane.process.pid, signal.SIGKILL)
        plane.process.wait()
        with pytest.raises(ControlPlaneError) as dead:
            plane.check()
        assert "the control plane exited with code -9" in str(dead.value)
        plane.stop()
        # The same directory again: the lock is free (its owner is dead), etcd replays its log.
        again = ControlPlane(controlplane.binary, ControlPlaneConfig(config.data_dir, unsafe_no_fsync=True)).start()
        try:
            assert kubectl_json(again, "get", "configmap", "kept", "-n", "default")["metadata"]["name"] == "kept"
            assert "recovering data directory" in again.log_path.read_text()
        finally:
            again.stop()
    finally:
        plane.stop()


# -- stopping: SIGTERM is a clean stop (exit 0) whenever it comes ---------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigterm_while_the_controller_manager_starts_its_controllers_is_a_clean_stop(
        controlplane: ControlPlane, tmp_path: Path) -> None:
    """SIGTERM just after `ready`, while kube-controller-manager builds its controllers (each asks the API server for
    its ServiceAccount, the namespace controller for discovery), a few times at different moments: the components
    stop before the API server does, so none of them loses it half-started and exits the process (klog.Fatal's
    255, klog.FlushAndExit's 1, neither releasing the lock). A restart, as in the CI run that once failed."""
    data_dir = tmp_path / "cp"
    ControlPlane(controlplane.binary, ControlPlaneConfig(data_dir, unsafe_no_fsync=True)).start().stop()
    outcomes = []
    for delay in (0.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.6, 1.0):
        plane = ControlPlane(controlplane.binary, ControlPlaneConfig(data_dir, unsafe_no_fsync=True))
        # start() returns once the `default` ServiceAccount answers; the signal goes at the `ready` line itself.
        starting = threading.Thread(target=_start_quietly, args=(plane,))
        starting.start()
        try:
            assert plane._ready.wait(120), plane.failure()
            process = plane.process
            assert process is not None
            time.sleep(delay)
            process.send_signal(signal.SIGTERM)
            process.wait(90)
            starting.join(60)
        finally:
            with contextlib.suppress(ControlPlaneError):
                plane.stop()
        outcomes.append((delay, process.returncode, (data_dir / "lock").read_text().strip(),
                         plane.failure() if process.returncode else ""))
    assert [(delay, code, owner) for delay, code, owner, _ in outcomes] == [
        (delay, 0, "") for delay, *_ in outcomes], outcomes


def _start_quietly(plane: ControlPlane) -> None:
    """start() in a thread of its own, whose end the test does not judge: a stop it races may fail it."""
    with contextlib.suppress(Exception):
        plane.start()


def test_sigterm_before_ready_is_a_clean_stop(controlplane: ControlPlane, tmp_path: Path) -> None:
    """SIGTERM while etcd or the API server is still starting stops what has started and exits 0 (it once
    exited 1, so a launcher stopping a start it gave up on reported the stop in place of its own reason)."""
    data_dir = tmp_path / "cp"
    plane = ControlPlane(controlplane.binary, ControlPlaneConfig(data_dir, unsafe_no_fsync=True))
    failures: list[BaseException] = []

    def start() -> None:
        try:
            plane.start()
        except BaseException as exc:  # handed to the test's thread
            failures.append(exc)

    starting = threading.Thread(target=start)
    starting.start()
    try:
        # etcd's directory appears once the binary has its signal handler and has begun to start etcd.
        eventually(lambda: (data_dir / "etcd").exists(), 60, what="etcd to begin starting")
        time.sleep(0.5)
        process = plane.process
        assert process is not None
        process.send_signal(signal.SIGTERM)
        starting.join(120)
    finally:
        plane.stop()
    assert not starting.is_alive()
    assert len(failures) == 1 and "the control plane exited with code 0 before it was ready" in str(failures[0]), \
        failures
    assert (data_dir / "lock").read_text() == ""  # a clean stop leaves no owner behind


@pytest.mark.slow
@pytest.mark.parametrize("component", ["controller-manager", "scheduler"])
def test_a_components_leader_election_is_refused(controlplane: ControlPlane, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch, component: str) -> None:
    """One control plane holds a data directory, so there is nobody to elect against; and the scheduler's leader
    election calls os.Exit itself when it stops, before the API server drained and etcd closed: refused."""
    plane = ControlPlane(controlplane.binary, ControlPlaneConfig(tmp_path / "cp", unsafe_no_fsync=True))
    write_flags = plane._flag_files

    def with_leader_election() -> dict[str, Path]:
        files = write_flags()
        with files[component].open("a") as flags:
            flags.write("--leader-elect=true\n")  # the last of a flag's values wins
        return files

    monkeypatch.setattr(plane, "_flag_files", with_leader_election)
    try:
        with pytest.raises(ControlPlaneError) as refused:
            plane.start()
    finally:
        plane.stop()  # had it started
    assert (f"controlplane: kube-{component}: leader election is not supported here (set --leader-elect=false)"
            in str(refused.value))
