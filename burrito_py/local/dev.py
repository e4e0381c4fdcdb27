"""`burrito-py dev`: the whole product on one machine — API emulator, local kubelet, datastore,
controllers — with real git and real terraform, and a kubeconfig so `kubectl` works."""

from __future__ import annotations

import contextlib
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
    """Prints each layer's state changes, so a newcomer sees PlanNeeded → Running → … → Idle."""

    def __init__(self, api_url: str, interval: float = 0.5) -> None:
        super().__init__(name="burrito-py-dev-progress", daemon=True)
        self._url, self._interval = api_url, interval
        self._stop_event = threading.Event()
        self._seen: dict[str, tuple[str, str]] = {}

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        with httpx.Client(base_url=self._url, timeout=10.0) as http:
            while not self._stop_event.wait(self._interval):
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    items = http.get("/apis/terraform.burrito-py.io/v1alpha1/terraformlayers").json().get("items", [])
                    for layer in items:
                        key = f"{layer['metadata']['namespace']}/{layer['metadata']['name']}"
                        status = layer.get("status") or {}
                        now = (status.get("state") or "Pending", status.get("lastResult") or "")
                        if self._seen.get(key) != now:
                            self._seen[key] = now
                            log.info("layer %-28s %-18s %s", key, now[0], now[1])


@contextlib.contextmanager
def running_dev(options: DevOptions) -> Iterator[dict[str, str]]:
    """Start everything; yield the endpoints; stop everything in reverse order."""
    from burrito_py.api.crdgen import generate_crds
    from burrito_py.controllers.operator import ControllerThread
    from burrito_py.controllers.settings import ControllerSettings
    from burrito_py.datastore.testing import running_datastore
    from burrito_py.local.apiserver import ApiServer
    from burrito_py.local.identity import login_as_local_admin
    from burrito_py.local.kubelet import LocalKubelet

    data_dir = options.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        api = ApiServer(port=options.api_port, pod_log_dir=data_dir / "pod-logs")
        api.start()
        stack.callback(api.stop)
        api.write_kubeconfig(options.kubeconfig)
        log.info("Kubernetes API emulator at %s (kubeconfig %s)", api.url, options.kubeconfig)

        applier = Applier(api.url)
        stack.callback(applier.close)
        for crd in generate_crds().values():
            applier.apply(crd)
        # What the Helm chart creates on a cluster: the runner pods' service account.
        applier.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "burrito-py-runner", "namespace": "default"}})

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

        progress = LayerProgress(api.url)
        progress.start()
        stack.callback(progress.stop)

        docs = load_files(options.manifests)
        if options.example:
            docs.extend(prepare_example(options.example, data_dir))
        for doc in docs:
            applied = applier.apply(doc)
            log.info("applied %s %s", applied.get("kind"), applied["metadata"]["name"])
        yield {"api": api.url, "datastore": datastore_url, "kubeconfig": str(options.kubeconfig)}


def run_dev(options: DevOptions) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("kopf", "aiohttp", "httpx", "uvicorn", "uvicorn.access", "burrito_py.local.kubelet"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    with running_dev(options) as endpoints:
        log.info(
            "ready. In another terminal:\n  export KUBECONFIG=%s\n  kubectl get tfr,tfl,tfrun\n"
            "  burrito-py plan download default/greetings --datastore-url %s\nCtrl-C stops everything.",
            endpoints["kubeconfig"],
            endpoints["datastore"],
        )
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    log.info("stopped")
