"""The runner image under a real container runtime (docs/architecture.md §18, §20, §22.8): a second node of the
session's real control plane, the local kubelet with its podman runtime (runc), runs pods from
`localhost/burrito-py-runner`, the chart's restricted securityContext for runner pods applied for real, and a
layer's plan and apply run in it end to end (the controllers, the datastore, a git repository).

The node is tainted from its registration (`burrito-py.io/runtime=podman:NoSchedule`): the scheduler places only
this file's pods on it (they tolerate the taint and select it by hostname), never another test's runner pods.

Needs podman, runc and buildah (scripts/test.sh installs them) and root; the image is built from this checkout by
`scripts/build-images.sh --local burrito-py-runner` (layer-cached: seconds when nothing changed). Missing tools
fail the test, naming them; it never skips."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from burrito_local.container_runtime import Podman
from burrito_local.host_node import HostNode

from burrito_py.api import annotations as ann
from burrito_py.controllers.run.runner_pod import CONTAINER_SECURITY_CONTEXT, POD_SECURITY_CONTEXT
from tests.support.git_repos import TestRepo
from tests.support.real_cluster import RealCluster

from .conftest import Platform, managed_layer_code, running_platform, wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]
PODMAN_NODE = "burrito-py-podman-node"
TAINT = {"key": "burrito-py.io/runtime", "value": "podman", "effect": "NoSchedule"}
ON_PODMAN_NODE: dict[str, Any] = {"nodeSelector": {"kubernetes.io/hostname": PODMAN_NODE},
                                  "tolerations": [{**TAINT, "operator": "Equal"}]}


@pytest.fixture(scope="module")
def runner_image() -> str:
    """The runner image of this checkout, built (or found in the layer cache) with buildah. `scripts/test.sh` builds
    it right before the suite and names it in `BURRITO_PY_TEST_RUNNER_IMAGE`: that one, when it is there, rather
    than a second warm build (20-30 s: the base's apt versions read again, every step checked against the cache)."""
    Podman()  # podman and runc, or RuntimeUnavailable naming what is missing
    built = os.environ.get("BURRITO_PY_TEST_RUNNER_IMAGE", "")
    if built and subprocess.run(["podman", "image", "exists", built], check=False).returncode == 0:
        return built
    done = subprocess.run(["bash", "scripts/build-images.sh", "--local", "burrito-py-runner"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=1800, check=False)
    assert done.returncode == 0, f"scripts/build-images.sh --local failed: {done.stderr[-2000:]}"
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def podman_node(real_cluster: RealCluster, runner_image: str,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostNode]:
    """The kubelet with the podman runtime as a second, tainted Node of the session's control plane; its Node is
    deleted after the module."""
    began = time.monotonic()
    node = HostNode(real_cluster.plane, tmp_path_factory.mktemp("podman-node"), name=PODMAN_NODE, runtime="podman",
                    taints=(TAINT,)).start()
    print(f"podman node Ready in {time.monotonic() - began:.1f}s")
    try:
        yield node
    finally:
        node.stop()
        real_cluster.admin.call("DELETE", f"/api/v1/nodes/{PODMAN_NODE}")


@pytest.fixture
def world(tmp_path: Path, real_cluster: RealCluster, podman_node: HostNode) -> Iterator[Platform]:
    """The test's namespace (Pod Security `restricted`); no controllers: the tests make their pods themselves."""
    with running_platform(tmp_path, tmp_path / "kubeconfig", cluster=real_cluster, start_controllers=False) as p:
        yield p


@pytest.fixture
def product(tmp_path: Path, real_cluster: RealCluster, podman_node: HostNode) -> Iterator[Platform]:
    """The test's namespace with the controllers and the datastore: the layers' runner pods go to the podman node."""
    with running_platform(tmp_path, tmp_path / "kubeconfig", cluster=real_cluster) as p:
        yield p


def pod_log(platform: Platform, name: str, namespace: str | None = None) -> str:
    """Through kube-apiserver and the podman node's kubelet API (`kubectl logs`)."""
    return str(platform.core.read_namespaced_pod_log(name, namespace or platform.namespace))


def test_a_pod_that_writes_to_its_read_only_root_fails_as_on_a_cluster(world: Platform, runner_image: str) -> None:
    def pod(name: str, read_only: bool) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
            "restartPolicy": "Never", "automountServiceAccountToken": False, **ON_PODMAN_NODE,
            "securityContext": POD_SECURITY_CONTEXT,
            "containers": [{"name": "main", "image": runner_image, "command": ["sh", "-c"],
                            "args": ["echo probe-uid=$(id -u) probe-gid=$(id -g); grep CapEff /proc/self/status; "
                                     "echo written > /home/burrito/written && echo wrote-home"],
                            "securityContext": {**CONTAINER_SECURITY_CONTEXT, "readOnlyRootFilesystem": read_only}}]}}

    world.core.create_namespaced_pod(world.namespace, pod("read-only", True))
    world.core.create_namespaced_pod(world.namespace, pod("writable", False))

    def ended(name: str) -> Any:
        found = world.core.read_namespaced_pod(name, world.namespace)
        return found if found.status.phase in ("Succeeded", "Failed") else None

    started = time.monotonic()
    refused = wait_for(lambda: ended("read-only"), 60, what="the read-only pod to end")
    assert refused.status.phase == "Failed"
    terminated = refused.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (2, "Error")  # sh: cannot create /home/burrito/written
    log = pod_log(world, "read-only")
    assert "Read-only file system" in log and "wrote-home" not in log, log
    assert "probe-uid=65532 probe-gid=65532" in log and "CapEff:\t0000000000000000" in log, log
    # The same image and user with a writable root: the write works (/home/burrito is the UID's in the image), so
    # it is the read-only root that refused it above.
    allowed = wait_for(lambda: ended("writable"), 60, what="the writable pod to end")
    assert allowed.status.phase == "Succeeded", pod_log(world, "writable")
    assert "wrote-home" in pod_log(world, "writable")
    print(f"two pods under podman: {time.monotonic() - started:.1f}s")


def test_a_non_root_policy_the_image_user_breaks_keeps_the_pod_waiting(
    world: Platform, real_cluster: RealCluster, runner_image: str
) -> None:
    # Pod Security `restricted` would refuse this pod at the API (runAsUser 0) before any kubelet sees it: the
    # kubelet's own check is exercised in a namespace at `privileged`, as one without the labels is.
    namespace = real_cluster.new_namespace(pod_security="privileged")
    try:
        world.core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "as-root"}, "spec": {
                "restartPolicy": "Never", "automountServiceAccountToken": False, **ON_PODMAN_NODE,
                "containers": [{"name": "main", "image": runner_image, "command": ["true"],
                                "securityContext": {"runAsNonRoot": True, "runAsUser": 0}}]}})

        def waiting() -> Any:
            statuses = world.core.read_namespaced_pod("as-root", namespace).status.container_statuses or []
            return statuses[0].state.waiting if statuses and statuses[0].state.waiting else None

        state = wait_for(waiting, 30, what="the pod to wait")
        assert state.reason == "CreateContainerConfigError"
        assert "container's runAsUser breaks non-root policy" in state.message
    finally:
        real_cluster.remove_namespace(namespace)




def test_a_layer_plans_and_applies_inside_the_runner_image(product: Platform, repo: TestRepo,
                                                            runner_image: str) -> None:
    # Managed state (§10.6): the state goes to the datastore over HTTP, since no host path is mounted in the
    # container. The runner's pods take the image and the podman node; their security context is runner_pod's own.
    repo.commit({"layers/boxed/main.tf": managed_layer_code("from-the-image")}, "a layer for the runner image")
    product.create_repository("repo", repo.url)
    started = time.monotonic()
    product.create_layer("boxed", "repo", "layers/boxed", auto_apply=True, state={"managed": True},
                         overrideRunnerSpec={"image": runner_image, "imagePullPolicy": "Never", **ON_PODMAN_NODE})
    # Ended either way: a runner that cannot run in the image (bookworm's Python 3.11.2: §18) ends MaxRetriesReached.
    ended = wait_for(lambda: (product.layer("boxed").get("status") or {}).get("state") in ("Idle", "MaxRetriesReached"),
                     240, interval=0.2, what="the layer to end its runs")
    assert ended and product.layer("boxed")["status"]["state"] == "Idle", product.layer("boxed")["status"]
    elapsed = time.monotonic() - started

    runs = product.runs("boxed")
    assert [(r["spec"]["action"], r["status"]["state"]) for r in runs] == [("plan", "Succeeded"),
                                                                          ("apply", "Succeeded")], runs
    assert all(not (r["status"].get("retries") or 0) for r in runs), runs  # each in one attempt
    pods = product.pods("boxed")
    assert len(pods) == 2
    for pod in pods:
        assert pod.spec.node_name == PODMAN_NODE and pod.spec.containers[0].image == runner_image
        context = pod.spec.containers[0].security_context
        assert (context.read_only_root_filesystem, context.run_as_non_root, context.capabilities.drop) == (
            True, True, ["ALL"])
        assert pod.spec.security_context.run_as_user == 65532
        assert pod.status.phase == "Succeeded", pod_log(product, pod.metadata.name)
    plan_pod = next(p for p in pods if p.metadata.labels[ann.LABEL_RUN] == runs[0]["metadata"]["name"])
    assert "1 to add" in pod_log(product, plan_pod.metadata.name)

    # The apply's result, recorded where the platform keeps it: the state in the datastore.
    state = httpx.get(f"{product.datastore_url}/api/v1/layers/{product.namespace}/boxed/state",
                      headers=product.admin_headers(), timeout=30)
    assert state.status_code == 200, state.text
    values = [i["attributes"]["input"]["value"] for r in state.json()["resources"] for i in r["instances"]]
    assert values == ["from-the-image"]
    print(f"plan and apply in the runner image: {elapsed:.1f}s")
