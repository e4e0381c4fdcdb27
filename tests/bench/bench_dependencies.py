"""Dependencies (issue 14): the delay from an upstream's apply being recorded (its `apply-run` annotation, which the
runner writes once the outputs are stored) to the dependent's plan run being created, over 20 changes of a
consumed output, with the e2e harness (emulator, kubelet, datastore, controllers, real terraform). Both times are
taken from one watch of the API, on this process's clock."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from burrito_local.kube_authn import ADMIN_TOKEN

from burrito_py.api import annotations as ann
from tests.e2e.conftest import running_platform
from tests.e2e.test_dependencies import cluster, network
from tests.support.emulator import wait_for
from tests.support.git_repos import make_repo

CHANGES = int(sys.argv[1]) if len(sys.argv) > 1 else 20
BASE = "/apis/terraform.burrito-py.io/v1alpha1/namespaces/default"


class Watch(threading.Thread):
    """Every change of A's apply-run, and every plan run of B created, with the time this process saw it."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.applies: list[float] = []
        self.plans: list[float] = []
        self.ready = threading.Event()

    def run(self) -> None:
        threads = [threading.Thread(target=self._watch, args=(kind,), daemon=True)
                   for kind in ("terraformlayers", "terraformruns")]
        for thread in threads:
            thread.start()
        self.ready.set()

    def _watch(self, kind: str) -> None:
        last_apply = None
        with httpx.stream("GET", f"{self.url}{BASE}/{kind}", params={"watch": "true"},
                          timeout=httpx.Timeout(10.0, read=None),
                          headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as response:
            for line in response.iter_lines():
                if not line:
                    continue
                event = json.loads(line)
                body = event["object"]
                now = time.monotonic()
                if kind == "terraformlayers" and body["metadata"]["name"] == "a":
                    apply_run = (body["metadata"].get("annotations") or {}).get(ann.APPLY_RUN)
                    if apply_run and apply_run != last_apply:
                        last_apply = apply_run
                        self.applies.append(now)
                elif (kind == "terraformruns" and event["type"] == "ADDED" and body["spec"]["layer"]["name"] == "b"
                      and body["spec"]["action"] == "plan"):
                    self.plans.append(now)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repo = make_repo(root / "upstream")
        repo.commit({"layers/a/main.tf": network(), "layers/b/main.tf": cluster()}, "a network and a cluster")
        with running_platform(root / "p", root / "kubeconfig") as platform:
            platform.create_repository("infra", repo.url)
            platform.create_layer("a", "infra", "layers/a", auto_apply=True)
            platform.create_layer("b", "infra", "layers/b", auto_apply=True,
                                  dependsOn=[{"name": "a", "inputs": {"vpc_id": "vpc_id"}}])
            platform.wait_state("a", "Idle", 120)
            platform.wait_state("b", "Idle", 120)
            watch = Watch(platform.api.url)
            watch.start()
            watch.ready.wait()
            time.sleep(1)
            delays = []
            for change in range(CHANGES):
                applies, plans = len(watch.applies), len(watch.plans)
                repo.commit({"layers/a/main.tf": network(vpc=f"vpc-{change + 10}")}, f"vpc {change}")
                wait_for(lambda a=applies, p=plans: len(watch.plans) > p and len(watch.applies) > a, 120,
                         interval=0.05, what="A's apply and B's plan")
                platform.wait_state("a", "Idle", 120)
                platform.wait_state("b", "Idle", 120)
                delays.append(watch.plans[plans] - watch.applies[applies])
    delays.sort()
    p99 = delays[min(len(delays) - 1, round(0.99 * (len(delays) - 1)))]
    print(f"A's apply recorded -> B's plan run created, {len(delays)} changes: p50 {statistics.median(delays):.3f} s, "
          f"p99 {p99:.3f} s, min {delays[0]:.3f} s (target p50 <= 2 s)")


if __name__ == "__main__":
    main()
