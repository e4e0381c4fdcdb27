"""`burrito-py dev`: the whole product on one machine — API emulator, local kubelet, datastore,
controllers — with real git and real terraform, and a kubeconfig so `kubectl` works."""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from burrito_py.local.apply import Applier, load_documents, load_files
from burrito_py.local.kube_authn import ADMIN_TOKEN

log = logging.getLogger("burrito_py.dev")
EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"


@dataclass
class DevOptions:
    data_dir: Path
    kubeconfig: Path
    manifests: list[Path] = field(default_factory=list)
    example: str | None = None
    drift_detection_period: timedelta = timedelta(minutes=5)
    repository_poll_interval: timedelta = timedelta(seconds=15)
    failure_grace_period: timedelta = timedelta(seconds=5)
    api_port: int = 0
    datastore_port: int = 0
    server_port: int = 0


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
    return load_documents(text)


class LayerProgress(threading.Thread):
    """Prints each layer's state changes as they are written (a watch, so none is missed), so a newcomer
    sees PlanNeeded → Running → ApplyNeeded → Running → Idle."""

    PATH = "/apis/terraform.burrito-py.io/v1alpha1/terraformlayers"

    def __init__(self, api_url: str) -> None:
        super().__init__(name="burrito-py-dev-progress", daemon=True)
        self._url = api_url
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
        with httpx.Client(base_url=self._url, timeout=httpx.Timeout(10.0, read=None),
                          headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as http:
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


@contextlib.contextmanager
def running_dev(options: DevOptions) -> Iterator[dict[str, str]]:
    """Start everything; yield the endpoints; stop everything in reverse order."""
    from burrito_py.api.crdgen import generate_crds
    from burrito_py.controllers.operator import ControllerThread
    from burrito_py.controllers.settings import ControllerSettings
    from burrito_py.datastore.testing import free_port, running_datastore
    from burrito_py.local.apiserver import ApiServer
    from burrito_py.local.identity import admin_client, grant_runner_access, login_as_local_admin
    from burrito_py.local.kubelet import LocalKubelet
    from burrito_py.server.serving import running_server
    from burrito_py.server.settings import ServerSettings

    data_dir = options.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        api = ApiServer(port=options.api_port, pod_log_dir=data_dir / "pod-logs")
        api.start()
        stack.callback(api.stop)
        api.write_kubeconfig(options.kubeconfig)
        log.info("Kubernetes API emulator at %s (kubeconfig %s)", api.url, options.kubeconfig)

        applier = Applier(api.url, served_timeout=30.0)  # kinds served by ApplicationDefinitions come later
        stack.callback(applier.close)
        for crd in generate_crds().values():
            applier.apply(crd)
        # What the Helm chart creates on a cluster: the runner pods' service account and its Role.
        with admin_client(api.url) as http:
            grant_runner_access(http, "default")

        # Auth on, as on a cluster: the kubeconfig user (controllers, kubectl, `plan download`) becomes a
        # service account the datastore treats as an admin; runners get pod-bound tokens from the kubelet.
        admin = login_as_local_admin(api.url, options.kubeconfig)
        datastore_url = stack.enter_context(
            running_datastore(data_dir / "datastore", auth_enabled=True, kubeconfig=options.kubeconfig,
                              admin_users=[admin])
        )
        log.info("datastore at %s", datastore_url)

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
        )
        controllers = ControllerThread(settings, options.kubeconfig)
        controllers.start()
        stack.callback(controllers.stop)
        log.info("controllers started")

        server_settings = ServerSettings(host="127.0.0.1", port=options.server_port or free_port(),
                                         kubeconfig=options.kubeconfig, datastore_url=datastore_url,
                                         auth_admin_users=[admin])
        server_url = stack.enter_context(running_server(server_settings))
        log.info("server at %s (webhooks: POST %s/api/webhook; REST: %s/docs)", server_url, server_url, server_url)

        progress = LayerProgress(api.url)
        progress.start()
        stack.callback(progress.stop)

        docs = load_files(options.manifests)
        if options.example:
            docs.extend(prepare_example(options.example, data_dir))
        for doc in docs:
            applied = applier.apply(doc)
            log.info("applied %s %s", applied.get("kind"), applied["metadata"]["name"])
        yield {"api": api.url, "datastore": datastore_url, "server": server_url, "kubeconfig": str(options.kubeconfig)}


def run_dev(options: DevOptions) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("kopf", "aiohttp", "httpx", "uvicorn", "uvicorn.access", "burrito_py.local.kubelet"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    with running_dev(options) as endpoints:
        log.info(
            "ready. In another terminal:\n  export KUBECONFIG=%s\n  kubectl get tfr,tfl,tfrun\n"
            "  burrito-py plan download default/greetings --datastore-url %s\n"
            "  curl -H \"Authorization: Bearer $(kubectl config view --raw -o jsonpath='{.users[0].user.token}')\" "
            "%s/api/layers\nCtrl-C stops everything.",
            endpoints["kubeconfig"],
            endpoints["datastore"],
            endpoints["server"],
        )
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    log.info("stopped")
