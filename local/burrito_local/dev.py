"""`burrito-py dev`: the whole product on one machine — API emulator, local kubelet, datastore,
controllers — with real git and real terraform, and a kubeconfig so `kubectl` works."""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import shutil
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from burrito_local.apply import Applier, load_documents, load_files
from burrito_local.kube_authn import ADMIN_TOKEN
from burrito_py.outbound import LOOPBACK_NETWORKS

log = logging.getLogger("burrito_py.dev")
EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"


MODES = ("chart", "in-process")
CLUSTERS = ("real", "emulator")


@dataclass
class DevOptions:
    data_dir: Path
    kubeconfig: Path
    manifests: list[Path] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)
    drift_detection_period: timedelta = timedelta(minutes=5)
    repository_poll_interval: timedelta = timedelta(seconds=15)
    failure_grace_period: timedelta = timedelta(seconds=5)
    api_port: int = 0
    datastore_port: int = 0
    server_port: int = 0
    # chart: the Helm chart installed into the emulator, components as pods under RBAC (what a cluster runs);
    # in-process: the components as threads of this process (faster to start).
    mode: str = "chart"
    values: dict[str, Any] = field(default_factory=dict)  # chart values merged over dev_values (top level)
    # real: the control plane built from the Kubernetes modules (docs §22), the kubelet as its Node, in a
    # network namespace; emulator: the API emulator (starts in about a second).
    cluster: str = "real"
    # chart mode: the datastore's provider and tool caches on (its HTTPS listener, runner pods pointed at it).
    caches: bool = False
    # chart mode: controllers pods. One node runs them all, so a standby guards against no node loss here, and a
    # second controllers process starting beside the first cost ~1.5 s of CPU on `dev`'s start (docs §13);
    # the leader failover test and bench ask for the chart's 2.
    controllers_replicas: int = 1

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"--mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.cluster not in CLUSTERS:
            raise ValueError(f"--cluster must be one of {', '.join(CLUSTERS)}, not {self.cluster!r}")
        if self.cluster == "real" and self.mode != "chart":
            raise ValueError("--mode in-process needs --cluster emulator: on the real control plane the "
                             "components run as the chart's pods")
        if self.controllers_replicas < 1:
            raise ValueError(f"controllers_replicas must be at least 1, not {self.controllers_replicas}")
        if self.caches and self.mode != "chart":
            raise ValueError("--caches needs --mode chart (the chart's datastore serves the caches over HTTPS)")


def prepare_example(name: str, data_dir: Path) -> list[dict[str, Any]]:
    """Turn examples/<name>/terraform into a git repository under the data dir; return its manifests."""
    source = EXAMPLES_DIR / name
    if not (source / "manifests.yaml").exists():
        raise FileNotFoundError(f"unknown example {name!r} (looked in {source})")
    repo = data_dir / "repos" / name
    if not (repo / ".git").exists():
        shutil.copytree(source / "terraform", repo, dirs_exist_ok=True)
        git = ["git", "-c", "user.name=burrito-py dev", "-c", "user.email=dev@burrito-py.local"]
        subprocess.run([*git, "init", "-q", "-b", "main", str(repo)], check=True)
        subprocess.run([*git, "-C", str(repo), "add", "-A"], check=True)
        subprocess.run([*git, "-C", str(repo), "commit", "-q", "-m", f"{name} example"], check=True)
    (data_dir / "state").mkdir(parents=True, exist_ok=True)
    text = (source / "manifests.yaml").read_text().replace("${DATA_DIR}", str(data_dir.resolve()))
    if "${ENGINES_ROOT}" in text:  # the opentofu and terragrunt examples run the engines built from Go modules
        text = text.replace("${ENGINES_ROOT}", str(engines_root()))
    return load_documents(text)


def engines_root() -> Path:
    """The root `scripts/build-engines.sh` assembled (docs/architecture.md §23): its `tenv/` holds OpenTofu,
    Terraform and Terragrunt in tenv's layout. Not built: a clear error naming the script."""
    script = EXAMPLES_DIR.parent / "scripts" / "build-engines.sh"
    result = subprocess.run(["bash", str(script), "--cached"], capture_output=True, text=True, check=False)
    if result.returncode != 0 or not result.stdout.strip():
        raise FileNotFoundError(f"the engines are not built: run `bash {script}` (about 14 minutes with Go; "
                                "docs/architecture.md §23)")
    return Path(result.stdout.strip())


class LayerProgress(threading.Thread):
    """Prints each layer's state changes as they are written (a watch, so none is missed), so a newcomer
    sees PlanNeeded → Running → ApplyNeeded → Running → Idle."""

    PATH = "/apis/terraform.burrito-py.io/v1alpha1/terraformlayers"

    def __init__(self, api_url: str, token: str = ADMIN_TOKEN, verify: ssl.SSLContext | bool = True) -> None:
        super().__init__(name="burrito-py-dev-progress", daemon=True)
        self._url, self._token, self._verify = api_url, token, verify
        self._stop_event = threading.Event()
        self._seen: dict[str, tuple[str, str]] = {}

    def stop(self) -> None:
        self._stop_event.set()

    def show(self, layer: dict[str, Any]) -> None:
        key = f"{layer['metadata']['namespace']}/{layer['metadata']['name']}"
        status = layer.get("status") or {}
        now = (status.get("state") or "Pending", status.get("lastResult") or "")
        if self._seen.get(key) != now:
            self._seen[key] = now
            log.info("layer %-28s %-18s %s", key, now[0], now[1])

    def run(self) -> None:
        version = ""
        with httpx.Client(base_url=self._url, timeout=httpx.Timeout(10.0, read=None), verify=self._verify,
                          headers={"Authorization": f"Bearer {self._token}"}) as http:
            while not self._stop_event.is_set():
                try:
                    if not version:
                        listing = http.get(self.PATH).json()
                        for layer in listing.get("items", []):
                            self.show(layer)
                        version = listing["metadata"]["resourceVersion"]
                    params = {"watch": "true", "resourceVersion": version, "timeoutSeconds": "30"}
                    with http.stream("GET", self.PATH, params=params) as events:
                        for line in events.iter_lines():
                            event = json.loads(line) if line else {}
                            if event.get("type") in ("ADDED", "MODIFIED"):
                                self.show(event["object"])
                                version = event["object"]["metadata"]["resourceVersion"]
                            elif event.get("type") == "ERROR":
                                version = ""  # expired: list again
                except (httpx.HTTPError, ValueError, KeyError):
                    version = ""
                    self._stop_event.wait(0.5)


RELEASE = "burrito-py"
RELEASE_NAMESPACE = "burrito-py-system"
TENANT = "default"
COMPONENTS = ("controllers", "datastore", "server")


def tenant_namespaces(docs: list[dict[str, Any]]) -> list[str]:
    """`default` and every namespace the manifests put objects in (layers, repositories, AGL instances, whose
    layers live in the instance's namespace): each needs the runner ServiceAccount, or its runs cannot start."""
    found = {TENANT}
    for doc in docs:
        namespace = (doc.get("metadata") or {}).get("namespace")
        if namespace and namespace != RELEASE_NAMESPACE:
            found.add(str(namespace))
        if doc.get("kind") == "Namespace" and (doc.get("metadata") or {}).get("name") != RELEASE_NAMESPACE:
            found.add(str(doc["metadata"]["name"]))
    return sorted(found)


def dev_values(options: DevOptions, agl_kinds: list[dict[str, str]] | None = None,
               tenants: list[str] | None = None) -> dict[str, Any]:
    """The chart values of `burrito-py dev`: `default` and the manifests' namespaces are the tenants (each gets
    the runner ServiceAccount; the chart creates the namespaces other than `default`); the local admin (the
    kubeconfig's user) is a datastore admin, so `plan download` works; the image is not pulled (the local
    kubelet runs the installed `burrito-py`); the UI's cookies are not Secure (plain http on localhost)."""
    from burrito_local.identity import LOCAL_ADMIN_USERNAME

    def iso(delta: timedelta) -> str:
        return f"PT{delta.total_seconds():g}S"

    return {
        "image": {"pullPolicy": "Never"},
        "runner": {"image": {"pullPolicy": "Never"}},
        "tenants": [{"namespace": ns, "create": ns != TENANT} for ns in tenants or [TENANT]],
        "controllers": {
            "replicas": options.controllers_replicas,
            "config": {
                "driftDetectionPeriod": iso(options.drift_detection_period),
                "repositoryPollInterval": iso(options.repository_poll_interval),
                "failureGracePeriod": iso(options.failure_grace_period),
                "allowFileRepositories": True,  # the examples' repositories are local directories
                # A local git server or webhook receiver is on loopback: allowed here, never by the chart's default.
                "outboundAllowedNetworks": list(LOOPBACK_NETWORKS),
            },
            "agl": {"kinds": agl_kinds or []},
        },
        "datastore": {"image": {"pullPolicy": "Never"}, "auth": {"extraAdminUsers": [LOCAL_ADMIN_USERNAME]}},
        # The UI is reached over plain http on this machine: Secure cookies would never come back.
        "server": {"config": {"uiSecureCookies": False}},
        **({"providerCache": {"enabled": True}, "toolCache": {"enabled": True}} if options.caches else {}),
        **options.values,
    }


def agl_kinds_of(docs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The kinds the manifests' ApplicationDefinitions serve: the chart grants the controllers exactly these."""
    kinds = []
    for doc in docs:
        if doc.get("kind") == "ApplicationDefinition":
            application = (doc.get("spec") or {}).get("application") or {}
            kind = {"plural": str(application.get("plural") or f"{str(application.get('kind', '')).lower()}s")}
            if application.get("group"):
                kind["group"] = str(application["group"])
            kinds.append(kind)
    return kinds


def service_url(http: httpx.Client, namespace: str, name: str) -> str:
    """The Service's cluster IP and first port: the local kubelet proxies it, so it answers from this host too."""
    service = http.get(f"/api/v1/namespaces/{namespace}/services/{name}").raise_for_status().json()
    return f"http://{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}"


def _install_chart(stack: contextlib.ExitStack, options: DevOptions, api_url: str, data_dir: Path,
                   docs: list[dict[str, Any]]) -> tuple[str, str]:
    """Install charts/burrito-py as `helm install` would; (datastore, server) URLs. The manifests follow at once, as
    a `kubectl apply` after `helm install`: a repository synced before the datastore answers says so and is
    synced again within seconds (docs/architecture.md §8), and `_finish` waits for every component."""
    from burrito_local.controller_manager import ControllerManager
    from burrito_local.identity import admin_client, ensure_namespace
    from burrito_local.install import install
    from burrito_local.kubelet import LocalKubelet
    from burrito_py.chart.chart import render_chart

    manager = ControllerManager(options.kubeconfig)
    manager.start()
    stack.callback(manager.stop)
    kubelet = LocalKubelet(options.kubeconfig, pod_log_dir=data_dir / "pod-logs", work_dir=data_dir / "pods")
    kubelet.start()
    stack.callback(kubelet.stop)

    objects = render_chart(dev_values(options, agl_kinds_of(docs), tenant_namespaces(docs)), RELEASE,
                           RELEASE_NAMESPACE)
    applier = Applier(api_url)
    stack.callback(applier.close)
    with admin_client(api_url) as http:
        ensure_namespace(http, RELEASE_NAMESPACE)  # `helm install --create-namespace`
        install(applier, objects, RELEASE_NAMESPACE)
        log.info("installed charts/burrito-py (%d objects) as release %s in %s", len(objects), RELEASE,
                 RELEASE_NAMESPACE)
        return (service_url(http, RELEASE_NAMESPACE, f"{RELEASE}-datastore"),
                service_url(http, RELEASE_NAMESPACE, f"{RELEASE}-server"))


def _start_in_process(stack: contextlib.ExitStack, options: DevOptions, api_url: str, data_dir: Path,
                      admin: str, docs: list[dict[str, Any]]) -> tuple[str, str]:
    """Today's quick mode: datastore, controllers and server as threads of this process; (datastore, server)."""
    from burrito_local.identity import admin_client, ensure_namespace, grant_runner_access, publish_local_service
    from burrito_local.kubelet import LocalKubelet
    from burrito_py.api.crdgen import generate_crds
    from burrito_py.chart.admission_policy import policy_objects
    from burrito_py.controllers.settings import ControllerSettings
    from burrito_py.datastore.in_process import free_port, running_datastore
    from burrito_py.operator.main import ControllerThread
    from burrito_py.server.serving import running_server
    from burrito_py.server.settings import ServerSettings

    applier = Applier(api_url)
    stack.callback(applier.close)
    for crd in generate_crds().values():
        applier.apply(crd)
    # The chart's ValidatingAdmissionPolicies; the server and the controllers run as the local admin here.
    for obj in policy_objects(RELEASE, [admin], ControllerSettings().runner_service_account, [admin]):
        applier.apply(obj)
    with admin_client(api_url) as http:  # what the chart creates in each tenant namespace
        for namespace in tenant_namespaces(docs):
            ensure_namespace(http, namespace)
            grant_runner_access(http, namespace)
    datastore_url = stack.enter_context(
        running_datastore(data_dir / "datastore", auth_enabled=True, kubeconfig=options.kubeconfig,
                          admin_users=[admin])
    )
    with admin_client(api_url) as http:  # reachable through the API's service proxy, as the chart's Service is
        publish_local_service(http, RELEASE_NAMESPACE, f"{RELEASE}-datastore", datastore_url, {
            "app.kubernetes.io/name": "burrito-py", "app.kubernetes.io/instance": RELEASE,
            "app.kubernetes.io/component": "datastore"})
    kubelet = LocalKubelet(options.kubeconfig, pod_log_dir=data_dir / "pod-logs", work_dir=data_dir / "pods")
    kubelet.start()
    stack.callback(kubelet.stop)
    settings = ControllerSettings(
        datastore_url=datastore_url,
        git_cache_dir=data_dir / "git",
        drift_detection_period=options.drift_detection_period,
        repository_poll_interval=options.repository_poll_interval,
        failure_grace_period=options.failure_grace_period,
        runner_image="local",
        metrics_port=0,
        allow_file_repositories=True,  # the examples' repositories are local directories
        outbound_allowed_networks=list(LOOPBACK_NETWORKS),  # a local git server or webhook receiver: loopback
    )
    controllers = ControllerThread(settings, options.kubeconfig)
    controllers.start()
    stack.callback(controllers.stop)
    server_settings = ServerSettings(host="127.0.0.1", port=options.server_port or free_port(),
                                     kubeconfig=options.kubeconfig, datastore_url=datastore_url,
                                     auth_admin_users=[admin])
    return datastore_url, stack.enter_context(running_server(server_settings))


@dataclass
class Cluster:
    """Where `dev` applies and watches: the API's URL, the local admin's token and how to verify the server."""

    api_url: str
    token: str
    verify: ssl.SSLContext | bool = True
    connect: Callable[[], httpx.Client] | None = None  # a cluster admin's client (the real control plane)


def _start_real(stack: contextlib.ExitStack, options: DevOptions, data_dir: Path,
                docs: list[dict[str, Any]]) -> tuple[Cluster, str, str]:
    """The control plane built from the Kubernetes modules and the local kubelet as its Node, in a network
    namespace (§22.3), with the chart installed as `helm install` would; the datastore's and server's Services
    forwarded to ports of this host. (cluster, datastore URL, server URL)."""
    from burrito_local.controlplane import binary_path, refuse_if_in_use
    from burrito_local.identity import ensure_namespace, local_admin_token, write_token_kubeconfig
    from burrito_local.install import install
    from burrito_local.netns import NodeNamespace
    from burrito_py.chart.chart import render_chart

    binary = binary_path(build=True)  # the first run builds it (minutes, with progress); later runs reuse it
    began = time.monotonic()
    # A fresh cluster each start, as the emulator's: a restarted kubelet would give the old pods new
    # addresses, which kube-apiserver refuses (pod IPs are immutable). Never under a running one.
    refuse_if_in_use(data_dir / "cluster" / "inside" / "cp")
    shutil.rmtree(data_dir / "cluster", ignore_errors=True)
    node = stack.enter_context(NodeNamespace(data_dir / "cluster", binary))
    log.info("Kubernetes v1.37 control plane and node %s ready in %.1fs (API at %s)", "burrito-py-node",
             time.monotonic() - began, node.api_url)
    with node.http_client() as http:
        token = local_admin_token(http)
    write_token_kubeconfig(options.kubeconfig, node.api_url, node.ca_file.read_bytes(), token)
    log.info("kubeconfig %s (the local admin: a cluster-admin service account)", options.kubeconfig)
    cluster = Cluster(node.api_url, token, ssl.create_default_context(cafile=str(node.ca_file)), node.http_client)
    objects = render_chart(dev_values(options, agl_kinds_of(docs), tenant_namespaces(docs)), RELEASE,
                           RELEASE_NAMESPACE)
    applier = Applier(cluster.api_url, token=token, verify=cluster.verify)
    stack.callback(applier.close)
    with node.http_client() as http:
        ensure_namespace(http, RELEASE_NAMESPACE)  # `helm install --create-namespace`
        install(applier, objects, RELEASE_NAMESPACE)
        log.info("installed charts/burrito-py (%d objects) as release %s in %s", len(objects), RELEASE,
                 RELEASE_NAMESPACE)
        urls = []
        for component in ("datastore", "server"):
            spec = http.get(f"/api/v1/namespaces/{RELEASE_NAMESPACE}/services/{RELEASE}-{component}"
                            ).raise_for_status().json()["spec"]
            urls.append(f"http://127.0.0.1:{node.forward(spec['clusterIP'], int(spec['ports'][0]['port']))}")
    return cluster, urls[0], urls[1]


@contextlib.contextmanager
def running_dev(options: DevOptions) -> Iterator[dict[str, str]]:
    """Start everything; yield the endpoints; stop everything in reverse order."""
    from burrito_local.apiserver import ApiServer
    from burrito_local.identity import admin_client, login_as_local_admin

    data_dir = options.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    if options.mode == "chart":  # load the Helm engine (~0.2 s) while the emulator or control plane starts
        helm = threading.Thread(target=importlib.import_module, args=("helm_python",), daemon=True)
        helm.start()
    if options.cluster == "real":
        with contextlib.ExitStack() as stack:
            docs = load_files(options.manifests)
            for example in options.examples:
                docs.extend(prepare_example(example, data_dir))
            cluster, datastore_url, server_url = _start_real(stack, options, data_dir, docs)
            yield _finish(stack, options, cluster, docs, datastore_url, server_url)
        return
    with contextlib.ExitStack() as stack:
        api = ApiServer(port=options.api_port, pod_log_dir=data_dir / "pod-logs")
        api.start()
        stack.callback(api.stop)
        api.write_kubeconfig(options.kubeconfig)
        log.info("Kubernetes API emulator at %s (kubeconfig %s)", api.tls_url, options.kubeconfig)

        docs = load_files(options.manifests)
        for example in options.examples:
            docs.extend(prepare_example(example, data_dir))
        # The kubeconfig user (kubectl, `plan download`) becomes a cluster-admin service account, so the
        # datastore and the server can review its token; runners and components get pod-bound tokens.
        admin = login_as_local_admin(api.url, options.kubeconfig)
        if options.mode == "chart":
            datastore_url, server_url = _install_chart(stack, options, api.url, data_dir, docs)
        else:
            datastore_url, server_url = _start_in_process(stack, options, api.url, data_dir, admin, docs)
        cluster = Cluster(api.url, ADMIN_TOKEN, connect=lambda: admin_client(api.url))
        yield _finish(stack, options, cluster, docs, datastore_url, server_url)


def _finish(stack: contextlib.ExitStack, options: DevOptions, cluster: Cluster, docs: list[dict[str, Any]],
            datastore_url: str, server_url: str) -> dict[str, str]:
    """Apply the manifests, follow the layers, and wait for the chart's components; the endpoints."""
    from burrito_local.install import wait_available

    log.info("datastore at %s", datastore_url)
    log.info("server at %s (webhooks: POST %s/api/webhook; REST: %s/docs)", server_url, server_url, server_url)
    log.info("web UI at %s/ui/ (log in with the token of %s)", server_url, options.kubeconfig)

    progress = LayerProgress(cluster.api_url, cluster.token, cluster.verify)
    progress.start()
    stack.callback(progress.stop)

    # kinds served by ApplicationDefinitions come later
    applier = Applier(cluster.api_url, served_timeout=30.0, token=cluster.token, verify=cluster.verify)
    stack.callback(applier.close)
    for doc in docs:
        applied = applier.apply(doc)
        log.info("applied %s %s", applied.get("kind"), applied["metadata"]["name"])
    if options.mode == "chart" and cluster.connect is not None:
        with cluster.connect() as http:
            wait_available(http, [(RELEASE_NAMESPACE, f"{RELEASE}-{c}") for c in COMPONENTS], timeout=180.0)
        log.info("controllers, datastore and server running as pods of the chart's Deployments")
    return {"api": cluster.api_url, "datastore": datastore_url, "server": server_url,
            "kubeconfig": str(options.kubeconfig)}


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def run_dev(options: DevOptions) -> None:
    # SIGTERM (`kill`, `timeout`) stops as Ctrl-C does: the pods' processes are stopped, not left running.
    signal.signal(signal.SIGTERM, _interrupt)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("kopf", "aiohttp", "httpx", "uvicorn", "uvicorn.access", "burrito_local.kubelet"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from burrito_local.controlplane import ControlPlaneError
    from burrito_local.netns import NamespaceError

    try:
        with running_dev(options) as endpoints:
            _serve(endpoints)
    except (ControlPlaneError, NamespaceError) as exc:  # one line naming the cause, no traceback
        log.error("error: %s", exc)
        raise SystemExit(1) from None
    log.info("stopped")


def _serve(endpoints: dict[str, str]) -> None:
    log.info(
        "ready. In another terminal:\n  export KUBECONFIG=%s\n  kubectl get tfr,tfl,tfrun\n"
        "  burrito-py plan download default/greetings --format short\n"
        "  curl -H \"Authorization: Bearer $(kubectl config view --raw -o jsonpath='{.users[0].user.token}')\" "
        "%s/api/layers\nCtrl-C stops everything.",
        endpoints["kubeconfig"],
        endpoints["server"],
    )
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(3600)
