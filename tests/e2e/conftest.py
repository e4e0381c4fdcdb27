"""End-to-end harness: the real product on one machine — the real control plane (or, where a test needs
its internals, the API emulator), the local kubelet running real `burrito-py runner start` processes with
real terraform, the datastore over HTTP, the kopf controllers, and real git repositories made by the tests
(docs/architecture.md §15, §22.8)."""

from __future__ import annotations

import contextlib
import shutil
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier
from burrito_local.controlplane import ControlPlane
from burrito_local.identity import admin_client, grant_runner_access, login_as_local_admin
from burrito_local.kubelet import LocalKubelet
from kubernetes import client, config

from burrito_py.api import annotations as ann
from burrito_py.api.crdgen import generate_crds
from burrito_py.chart.admission_policy import policy_objects
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.datastore.in_process import running_datastore
from burrito_py.kube.inventory import creation_order
from burrito_py.kube.kubeconfig import read_kubeconfig
from burrito_py.operator.main import ControllerThread
from burrito_py.outbound import LOOPBACK_NETWORKS
from tests.support.emulator import wait_for
from tests.support.engines import ENGINES, Engine, engines_root
from tests.support.fault_proxy import FaultProxy
from tests.support.git_repos import TestRepo, make_repo
from tests.support.real_cluster import RealCluster

T = TypeVar("T")

pytestmark = pytest.mark.e2e
# On a cluster the Helm chart creates the runner's service account in each namespace with layers.

# A layer with no backend of its own: on managed state (docs/architecture.md §10.6) the runner gives it the
# datastore's.
MANAGED_LAYER_TF = """
variable "message" {
  type    = string
  default = "%s"
}

resource "terraform_data" "this" {
  input = var.message
}

output "message" {
  value = terraform_data.this.output
}
"""
LAYER_TF = """
terraform {
  backend "local" {}
}
""" + MANAGED_LAYER_TF


def layer_code(message: str = "hello") -> str:
    return LAYER_TF % message


def managed_layer_code(message: str = "hello") -> str:
    return MANAGED_LAYER_TF % message


def api_http(kubeconfig: Path, token: str | None = None) -> httpx.Client:
    """The API over HTTP as `kubeconfig`'s user, or as the bearer of `token`."""
    user = read_kubeconfig(kubeconfig)
    context = ssl.create_default_context(cadata=user.ca_data.decode() if user.ca_data else None,
                                         cafile=user.ca_path)
    return httpx.Client(base_url=user.server, timeout=30, verify=context,
                        headers={"Authorization": f"Bearer {token or user.token}"})


@dataclass
class Platform:
    api: ApiServer | None  # the emulator, in the emulator world; None on the real control plane
    datastore_url: str
    kubeconfig: Path
    workdir: Path
    custom: client.CustomObjectsApi
    core: client.CoreV1Api
    controllers: ControllerThread | None  # None: the test runs its own (e.g. `controllers start` processes)
    settings: ControllerSettings
    namespace: str = "default"  # the test's namespace: its own on the real control plane
    # The fault proxy the controllers talk to (`running_platform(..., fault_proxy=True)`, the real world only).
    proxy: FaultProxy | None = None
    controllers_kubeconfig: Path | None = None  # the controllers' (the proxy's address when there is one)
    pod_logs: Path | None = None  # the kubelet's log files of this test's pods
    kubelet: LocalKubelet | None = None  # the kubelet running this test's pods (for a stuck pod's diagnosis)

    @property
    def emulator(self) -> ApiServer:
        """The emulator's internals, for the tests that need them (the emulator world only)."""
        assert self.api is not None, "this test needs the emulator world (running_platform(..., cluster=None))"
        return self.api

    @property
    def faults(self) -> FaultProxy:
        """The fault proxy in front of kube-apiserver: its `inject_fault` and `requests` (the controllers' calls)."""
        assert self.proxy is not None, "this test needs running_platform(..., cluster=..., fault_proxy=True)"
        return self.proxy

    def api_http(self, token: str | None = None) -> httpx.Client:
        """The API over HTTP as the kubeconfig's user (the cluster admin's ServiceAccount, in both worlds), or as
        the bearer of `token`."""
        return api_http(self.kubeconfig, token)

    def admin_headers(self) -> dict[str, str]:
        """The kubeconfig user's bearer token (the cluster admin's, which the datastore takes as an admin)."""
        return {"Authorization": f"Bearer {read_kubeconfig(self.kubeconfig).token}"}

    # -- objects -------------------------------------------------------------------------------
    def create_repository(self, name: str, url: str, **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": ann.API_VERSION, "kind": "TerraformRepository",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"repository": {"url": url}, **spec},
        }
        return self.custom.create_namespaced_custom_object(ann.GROUP, ann.VERSION, self.namespace,
                                                            "terraformrepositories", body)

    def create_layer(self, name: str, repository: str, path: str, *, auto_apply: bool = False,
                     branch: str = "main", engine: Engine | None = None, **spec: Any) -> dict[str, Any]:
        """`engine`: run on that engine from the built engines root (its tools baked into the runner, as the
        runner image's are); None: whatever the runner finds (the machine's terraform on PATH)."""
        state = self.workdir / "state" / f"{name}.tfstate"
        state.parent.mkdir(parents=True, exist_ok=True)
        override: dict[str, Any] = {"extraInitArgs": [f"-backend-config=path={state}"]}
        if engine is not None:
            override["env"] = engine.baked_env()
            spec = {**engine.spec(), **spec}
        body = {
            "apiVersion": ann.API_VERSION, "kind": "TerraformLayer",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "repository": {"name": repository}, "branch": branch, "path": path,
                "remediationStrategy": {"autoApply": auto_apply, **spec.pop("remediation", {})},
                "overrideRunnerSpec": override,
                **spec,
            },
        }
        return self.custom.create_namespaced_custom_object(ann.GROUP, ann.VERSION, self.namespace, "terraformlayers",
                                                            body)

    def state_file(self, layer: str) -> Path:
        return self.workdir / "state" / f"{layer}.tfstate"

    def layer(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(ann.GROUP, ann.VERSION, self.namespace, "terraformlayers", name)

    def annotations(self, name: str) -> dict[str, str]:
        return self.layer(name)["metadata"].get("annotations") or {}

    def runs(self, layer: str | None = None) -> list[dict[str, Any]]:
        selector = f"{ann.LABEL_LAYER}={layer}" if layer else None
        items = self.custom.list_namespaced_custom_object(ann.GROUP, ann.VERSION, self.namespace, "terraformruns",
                                                          label_selector=selector)["items"]
        return sorted(items, key=creation_order)  # runs created in one second: by the controller's stamp

    def pods(self, layer: str) -> list[Any]:
        return self.core.list_namespaced_pod(self.namespace, label_selector=f"{ann.LABEL_LAYER}={layer}").items

    def wait_state(self, layer: str, state: str, timeout: float = 60.0) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            body = self.layer(layer)
            return body if (body.get("status") or {}).get("state") == state else None

        return self.wait_reporting(reached, timeout, f"layer {layer} to be {state}", layer, interval=0.1)

    def wait_reporting(self, predicate: Callable[[], T], timeout: float, what: str, *layers: str,
                       interval: float = 0.2) -> T:
        """`wait_for`, whose failure says where `layers` and every runner pod stood (`layers_report`)."""
        try:
            return wait_for(predicate, timeout, interval=interval, what=what)
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}\n{self.layers_report(*layers)}") from None

    def layers_report(self, *layers: str) -> str:
        """For a failure's message: each layer's state, status, annotations and runs, then the runner pods."""
        lines = []
        for layer in layers:
            body = self.layer(layer)
            lines.append(f"layer {layer} is {(body.get('status') or {}).get('state')}; status={body.get('status')}; "
                         f"annotations={body['metadata'].get('annotations')}; "
                         f"runs={[self._run_summary(r) for r in self.runs(layer)]}")
        return "\n".join([*lines, self.runner_pods_report()])

    def runner_pods_report(self) -> str:
        """For a failure's message: each runner pod of the test's namespace as the API and the node see it (phase,
        node, conditions, container state, the tail of its log, or that there is none), so a run stuck Running
        says where it stopped: never scheduled, never started by the kubelet, or started and hung."""
        lines = []
        pods = self.core.list_namespaced_pod(self.namespace,
                                             label_selector=f"{ann.LABEL_COMPONENT}={ann.COMPONENT_RUNNER}").items
        for pod in pods:
            status = pod.status
            states = [(c.name, c.state.to_dict() if c.state else None) for c in status.container_statuses or ()]
            conditions = [(c.type, c.status, c.reason) for c in status.conditions or ()]
            where = [self.pod_logs / pod.metadata.name, self.pod_logs / self.namespace / pod.metadata.name] \
                if self.pod_logs else []  # the real node's directory is the namespace's, the emulator's holds them
            logs = sorted(log for directory in where for log in directory.glob("*.log"))
            tail = " | ".join(logs[0].read_text(errors="replace").splitlines()[-5:]) if logs else "no log file"
            kubelet = self.kubelet.describe_pod(pod.metadata.uid) if self.kubelet is not None else "not known"
            lines.append(f"pod {pod.metadata.name}: phase={status.phase} node={pod.spec.node_name} "
                         f"created={pod.metadata.creation_timestamp} deleting={pod.metadata.deletion_timestamp} "
                         f"conditions={conditions} containers={states} the kubelet: {kubelet}; log: {tail}")
        return "\n".join(lines) or "no runner pod"

    @staticmethod
    def _run_summary(run: dict[str, Any]) -> tuple[str, str, Any, Any]:
        status = run.get("status") or {}
        return run["metadata"]["name"], run["spec"]["action"], status.get("state"), status.get("retries")

    def sync_now(self, layer: str) -> None:
        self.custom.patch_namespaced_custom_object(
            ann.GROUP, ann.VERSION, self.namespace, "terraformlayers", layer,
            {"metadata": {"annotations": {ann.SYNC_NOW: "now"}}},
        )


def controller_settings(datastore_url: str, workdir: Path, **overrides: Any) -> ControllerSettings:
    return ControllerSettings(**{
        "datastore_url": datastore_url,
        "git_cache_dir": workdir / "git-cache",
        "drift_detection_period": timedelta(hours=1),
        "repository_poll_interval": timedelta(seconds=1),
        "failure_grace_period": timedelta(seconds=1),
        "failure_grace_period_cap": timedelta(seconds=4),
        "metrics_port": 0,
        "runner_image": "local",
        "allow_file_repositories": True,  # TestRepo serves its repositories as file:// URLs
        # Git servers, fake providers and webhook receivers of the tests listen on loopback: allowed explicitly.
        "outbound_allowed_networks": list(LOOPBACK_NETWORKS),
        **overrides,
    })


@contextlib.contextmanager
def running_platform(workdir: Path, kubeconfig: Path, admission_policy: bool = True, start_controllers: bool = True,
                     datastore: dict[str, Any] | None = None, kubelet_runtime: str = "process",
                     cluster: RealCluster | None = None, fault_proxy: bool = False,
                     **overrides: Any) -> Iterator[Platform]:
    """The harness: on `cluster` (the session's real control plane, §22.8) a fresh namespace of its own, else
    the emulator; the CRDs, the chart's admission policies (unless `admission_policy` is False, as on a
    cluster older than 1.30: the real cluster has them once for the session, and skips a namespace so made), the
    datastore (`datastore`: further DatastoreSettings), the kubelet and the controllers (unless
    `start_controllers` is False: `settings` then says how to run them; on the real cluster they watch the
    test's namespace only). `kubelet_runtime` "podman" runs the emulator world's pods from their images
    (docs/architecture.md §20). `fault_proxy` (the real cluster only): the controllers talk to kube-apiserver
    through a fault-injecting proxy (`Platform.faults`, tests/support/fault_proxy.py), everything else directly."""
    if fault_proxy and cluster is None:
        raise ValueError("the fault proxy stands in front of the real control plane: pass cluster=real_cluster")
    if cluster is not None:
        if kubelet_runtime != "process":
            raise ValueError("the real cluster's kubelet runs processes: use the emulator for kubelet_runtime")
        with _real_platform(cluster, workdir, kubeconfig, start_controllers, datastore, fault_proxy,
                            overrides, admission_policy) as platform:
            yield platform
        return
    with contextlib.ExitStack() as stack:
        api = ApiServer(pod_log_dir=workdir / "pod-logs")
        api.start()
        stack.callback(api.stop)
        api.write_kubeconfig(kubeconfig)
        applier = Applier(api.url)
        stack.callback(applier.close)
        for crd in generate_crds().values():
            applier.apply(crd)
        with admin_client(api.url) as http:
            grant_runner_access(http, "default")
        # Datastore auth on end to end: controllers and `plan download` as the kubeconfig's service account,
        # runners with their pod-bound projected tokens.
        admin = login_as_local_admin(api.url, kubeconfig)
        # The chart's admission policies; the controllers and a server started by a test run as the local admin.
        for obj in policy_objects("burrito-py", [admin], "burrito-py-runner", [admin]) if admission_policy else ():
            applier.apply(obj)
        datastore_url = stack.enter_context(running_datastore(workdir / "datastore", auth_enabled=True,
                                                              kubeconfig=kubeconfig, admin_users=[admin],
                                                              **(datastore or {})))
        kubelet = LocalKubelet(kubeconfig, pod_log_dir=workdir / "pod-logs", work_dir=workdir / "pods",
                               runtime=kubelet_runtime)
        kubelet.start()
        stack.callback(kubelet.stop)
        settings = controller_settings(datastore_url, workdir, **overrides)
        controllers = ControllerThread(settings, kubeconfig) if start_controllers else None
        if controllers is not None:
            controllers.start()
            stack.callback(controllers.stop)
        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        stack.callback(api_client.close)
        yield Platform(api, datastore_url, kubeconfig, workdir, client.CustomObjectsApi(api_client),
                       client.CoreV1Api(api_client), controllers, settings, controllers_kubeconfig=kubeconfig,
                       pod_logs=workdir / "pod-logs", kubelet=kubelet)


@contextlib.contextmanager
def _real_platform(cluster: RealCluster, workdir: Path, kubeconfig: Path, start_controllers: bool,
                   datastore: dict[str, Any] | None, fault_proxy: bool, overrides: dict[str, Any],
                   admission_policy: bool = True) -> Iterator[Platform]:
    """On the session's control plane: the test's namespace (the chart's runner accounts and Roles in it),
    the datastore reviewing tokens with kube-apiserver, the controllers watching that namespace only (the
    objects earlier tests left in theirs are not reconciled). Leaving: the controllers stop, then the
    namespace goes (its finalizers stripped: nobody is left to remove them)."""
    with contextlib.ExitStack() as stack:
        namespace = cluster.new_namespace(admission_policy=admission_policy)
        stack.callback(cluster.remove_namespace, namespace)
        cluster.write_kubeconfig(kubeconfig, namespace)
        admin = cluster.admin_username
        datastore_url = stack.enter_context(running_datastore(workdir / "datastore", auth_enabled=True,
                                                              kubeconfig=kubeconfig, admin_users=[admin],
                                                              **(datastore or {})))
        # The test's namespace is also where the controllers keep what a pod would keep in its own namespace
        # (in this process, own_namespace() is `default`, which every test of the session shares).
        own = {"namespaces": [namespace], "webhook_keys_namespace": namespace, "leader_election_namespace": namespace}
        settings = controller_settings(datastore_url, workdir, **{**own, **overrides})
        proxy: FaultProxy | None = None
        controllers_kubeconfig = kubeconfig
        if fault_proxy:
            pki = cluster.plane.pki
            proxy = FaultProxy(cluster.plane.server, pki.ca_crt.read_bytes(), pki.ca_key.read_bytes(),
                               workdir / "fault-proxy").start()
            stack.callback(proxy.stop)
            controllers_kubeconfig = proxy.write_kubeconfig(kubeconfig, workdir / "controllers.kubeconfig")
        controllers = ControllerThread(settings, controllers_kubeconfig) if start_controllers else None
        if controllers is not None:
            controllers.start()
            stack.callback(controllers.stop)
        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        stack.callback(api_client.close)
        yield Platform(None, datastore_url, kubeconfig, workdir, client.CustomObjectsApi(api_client),
                       client.CoreV1Api(api_client), controllers, settings, namespace, proxy, controllers_kubeconfig,
                       cluster.node.workdir / "pod-logs" / namespace, cluster.node.kubelet)


@pytest.fixture(scope="session")
def real_cluster(controlplane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """The session's control plane (one per xdist worker) with the kubelet as its Node, the CRDs and the
    admission policies: every test on it gets a namespace of its own (`running_platform(..., cluster=...)`)."""
    cluster = RealCluster(controlplane, tmp_path_factory.mktemp("real-cluster")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def kubeconfig_path(tmp_path: Path) -> Path:
    return tmp_path / "kubeconfig"


@pytest.fixture
def platform(tmp_path: Path, kubeconfig_path: Path, real_cluster: RealCluster) -> Iterator[Platform]:
    """The product on the session's real control plane, in a namespace of the test's own."""
    with running_platform(tmp_path, kubeconfig_path, cluster=real_cluster) as p:
        yield p


@pytest.fixture
def fault_platform(tmp_path: Path, kubeconfig_path: Path, real_cluster: RealCluster) -> Iterator[Platform]:
    """The product on the session's real control plane, its controllers behind the fault proxy
    (`Platform.faults`: inject_fault, requests)."""
    with running_platform(tmp_path, kubeconfig_path, cluster=real_cluster, fault_proxy=True) as p:
        yield p


@pytest.fixture
def repo(tmp_path: Path) -> TestRepo:
    r = make_repo(tmp_path / "upstream")
    r.commit({"layers/app/main.tf": layer_code("v1"), "layers/other/main.tf": layer_code("other"),
              "modules/shared/README.md": "shared module\n", "docs/README.md": "docs\n"}, "initial layout")
    return r


@pytest.fixture(params=ENGINES, ids=lambda engine: engine.id)
def engine(request: pytest.FixtureRequest) -> Engine:
    """Each engine the core scenarios run on (terraform 1.11.4, tofu 1.12.6), from the built engines root; a
    missing build fails naming scripts/build-engines.sh."""
    engines_root()
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(autouse=True, scope="session")
def _tools_present() -> None:
    for tool in ("terraform", "git", "burrito-py"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} must be on PATH for the end-to-end tests")
