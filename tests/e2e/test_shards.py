"""Two controllers shards as two real `burrito-py controllers start` processes against the session's real control
plane (docs/architecture.md §2.1, §22.8), in namespaces of the test's own: every name carries the test's tag
(`s<hex>-team-a-prod`, …) and so do the shard patterns (`s<hex>-team-a-*,!*-sandbox`), so neither shard
matches another test's namespaces.

Which shard holds a layer is read from each process's own metrics (`burrito_py_layers`, computed from that
process's inventory: a shard never holds another shard's objects); that it acted once and only once is read
from the API (exactly one TerraformRun and one runner pod per layer). The runner pods select a node that does
not exist (`overrideRunnerSpec.nodeSelector`), so the session's kubelet never runs them: they stay Pending,
which is all the test needs to count them."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from burrito_py.api import annotations as ann
from burrito_py.datastore.in_process import running_datastore
from tests.e2e.conftest import api_http, layer_code
from tests.support.emulator import wait_for
from tests.support.git_repos import TestRepo, make_repo
from tests.support.real_cluster import RealCluster

pytestmark = pytest.mark.e2e

# Runner pods select no node: the session's kubelet leaves them Pending (see the module).
NO_NODE = {"nodeSelector": {"burrito-py.io/e2e-no-such-node": "true"}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ShardProcess:
    name: str
    process: subprocess.Popen[bytes]
    metrics_port: int
    log: Path

    def layers_held(self) -> int:
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        for family in text_string_to_metric_families(text):
            if family.name == "burrito_py_layers":
                return int(sum(sample.value for sample in family.samples))
        return 0

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


@dataclass
class Cluster:
    real: RealCluster
    http: httpx.Client
    kubeconfig: Path
    datastore_url: str
    workdir: Path
    repo: TestRepo
    tag: str  # every namespace of the test, and every shard pattern, starts with it
    namespaces: list[str]

    def ns(self, name: str) -> str:
        """The test's own namespace `name` (`team-a-prod` → `s1a2b3c-team-a-prod`)."""
        return f"{self.tag}-{name}"

    def start_shard(self, name: str, shards: list[dict[str, Any]], generation: int = 0) -> ShardProcess:
        port = _free_port()
        log = self.workdir / f"shard-{name}-{generation}.log"
        env = {
            **os.environ,
            "BURRITO_PY_SHARDS": json.dumps(shards),
            "BURRITO_PY_SHARD": name,
            "BURRITO_PY_DATASTORE_URL": self.datastore_url,
            "BURRITO_PY_GIT_CACHE_DIR": str(self.workdir / f"git-cache-{name}"),
            "BURRITO_PY_HOST": "127.0.0.1",
            "BURRITO_PY_METRICS_PORT": str(port),
            # What a pod keeps in its own namespace goes to the test's (this process's own is `default`, which
            # every test of the session shares), in a Secret per shard as the chart names it.
            "BURRITO_PY_WEBHOOK_KEYS_NAMESPACE": self.ns("system"),
            "BURRITO_PY_WEBHOOK_KEYS_SECRET": f"burrito-py-webhook-keys-{name}",
            # Their authorization is test_metrics_auth.py's: this test reads plain metrics.
            "BURRITO_PY_METRICS_AUTH": "false",
            "BURRITO_PY_REPOSITORY_POLL_INTERVAL": "1s",
            "BURRITO_PY_DRIFT_DETECTION_PERIOD": "1h",
            "BURRITO_PY_RUNNER_IMAGE": "local",
            "BURRITO_PY_ALLOW_FILE_REPOSITORIES": "true",
            "BURRITO_PY_ALLOW_CROSS_NAMESPACE_REPOSITORIES": "true",
        }
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "burrito_py.cli", "controllers", "start", "--kubeconfig", str(self.kubeconfig)],
                env=env, stdout=out, stderr=subprocess.STDOUT,
            )
        shard = ShardProcess(name, process, port, log)
        wait_for(lambda: b"controllers started" in log.read_bytes() or process.poll() is not None, 60,
                 interval=0.1, what=f"shard {name} to start")
        assert process.poll() is None, log.read_text()
        return shard

    def add_namespace(self, namespace: str) -> None:
        """The namespace (the chart's runner accounts and Roles in it), a repository and a layer."""
        self.real.new_namespace(name=namespace)
        self.namespaces.append(namespace)
        self._create(namespace, "terraformrepositories", {
            "kind": "TerraformRepository", "metadata": {"name": "infra", "namespace": namespace},
            "spec": {"repository": {"url": self.repo.url}}})
        self.add_layer(namespace, "app")

    def add_layer(self, namespace: str, name: str, repository: dict[str, str] | None = None) -> None:
        self._create(namespace, "terraformlayers", {
            "kind": "TerraformLayer", "metadata": {"name": name, "namespace": namespace},
            "spec": {"repository": repository or {"name": "infra"}, "branch": "main", "path": "layers/app",
                     "overrideRunnerSpec": NO_NODE}})

    def _create(self, namespace: str, plural: str, body: dict[str, Any]) -> None:
        response = self.http.post(f"/apis/{ann.API_VERSION}/namespaces/{namespace}/{plural}",
                                  json={"apiVersion": ann.API_VERSION, **body})
        assert response.status_code == 201, response.text

    def objects(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        group = "/api/v1" if plural == "pods" else f"/apis/{ann.API_VERSION}"
        items: list[dict[str, Any]] = self.http.get(f"{group}/namespaces/{namespace}/{plural}").json()["items"]
        return items

    def layer(self, namespace: str, name: str = "app") -> dict[str, Any]:
        body: dict[str, Any] = self.http.get(
            f"/apis/{ann.API_VERSION}/namespaces/{namespace}/terraformlayers/{name}").json()
        return body

    def planned_once(self, namespace: str) -> None:
        """The layer's plan run and its runner pod exist, and stay alone (no second shard adds its own)."""
        wait_for(lambda: self.objects("pods", namespace), 60, interval=0.2, what=f"a runner pod in {namespace}")
        time.sleep(1.5)  # both shards have had every event by now; a duplicate would show
        runs = self.objects("terraformruns", namespace)
        assert [r["spec"]["action"] for r in runs] == ["plan"], runs
        assert len(self.objects("pods", namespace)) == 1


@pytest.fixture
def cluster(tmp_path: Path, real_cluster: RealCluster) -> Iterator[Cluster]:
    tag = f"s{uuid.uuid4().hex[:6]}"
    namespaces: list[str] = []
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: [real_cluster.remove_namespace(n) for n in namespaces])
        system = real_cluster.new_namespace(name=f"{tag}-system")  # in no shard's set: the webhook keys
        namespaces.append(system)
        kubeconfig = real_cluster.write_kubeconfig(tmp_path / "kubeconfig", system)
        datastore_url = stack.enter_context(running_datastore(tmp_path / "datastore"))
        http = stack.enter_context(api_http(kubeconfig))
        repo = make_repo(tmp_path / "upstream")
        repo.commit({"layers/app/main.tf": layer_code("v1")}, "initial")
        yield Cluster(real_cluster, http, kubeconfig, datastore_url, tmp_path, repo, tag, namespaces)


def test_each_layer_is_reconciled_by_exactly_one_shard_and_moves_with_the_shard_sets(cluster: Cluster) -> None:
    t = cluster.tag
    prod, sandbox, team_b, payments, team_b_new = (cluster.ns(n) for n in (
        "team-a-prod", "team-a-sandbox", "team-b", "payments", "team-b-new"))
    shards = [{"name": "a", "namespaces": f"{t}-team-a-*,!*-sandbox"}, {"name": "b", "namespaces": f"{t}-team-*"}]
    for namespace in (prod, sandbox, team_b, payments):
        cluster.add_namespace(namespace)
    a = cluster.start_shard("a", shards)
    b = cluster.start_shard("b", shards)
    try:
        # a: team-a-prod; b: team-a-sandbox (a's negation) and team-b; payments: no shard, nobody.
        for namespace in (prod, sandbox, team_b):
            cluster.planned_once(namespace)
        assert (a.layers_held(), b.layers_held()) == (1, 2)
        assert cluster.objects("terraformruns", payments) == []
        assert "status" not in cluster.layer(payments)
        # b's pattern team-* also matches team-a-prod (overlap): b ignores it, and says so once.
        b_log = b.log.read_text()
        assert b_log.count(f"namespace {prod} matches the namespaces of shard 'b' but belongs to shard 'a'") == 1

        # A namespace created after start, in b's set, is b's: kopf's namespace watch follows it.
        cluster.add_namespace(team_b_new)
        cluster.planned_once(team_b_new)
        wait_for(lambda: b.layers_held() == 3, 10, interval=0.2, what="b to hold team-b-new's layer")
        assert a.layers_held() == 1

        # Within a shard, a repository of another namespace is used; outside it, it is not found, saying why.
        cluster.add_layer(team_b, "cross-shard", {"name": "infra", "namespace": prod})

        def not_found() -> str | None:
            conditions = (cluster.layer(team_b, "cross-shard").get("status") or {}).get("conditions") or ()
            return next((c["message"] for c in conditions if c.get("reason") == "RepositoryNotFound"), None)

        message = wait_for(not_found, 20, interval=0.2, what="cross-shard layer to report its repository")
        assert f"namespace '{prod}' is outside shard 'b' (it belongs to shard 'a')" in message
    finally:
        a.stop()
        b.stop()

    # The shard sets change (a helm upgrade re-rendering BURRITO_PY_SHARDS; the pods restart): a now takes
    # every team-a-* namespace, sandboxes included, and payments moves into b's set.
    moved = [{"name": "a", "namespaces": f"{t}-team-a-*"}, {"name": "b", "namespaces": [f"{t}-team-*", payments]}]
    a = cluster.start_shard("a", moved, generation=1)
    b = cluster.start_shard("b", moved, generation=1)
    try:
        wait_for(lambda: (a.layers_held(), b.layers_held()) == (2, 4), 20, interval=0.2,
                 what="team-a-sandbox's layer with a, payments' with b")
        cluster.planned_once(payments)  # b plans the layer no shard had
        # The moved layer keeps its one run: the new owner adopts it rather than planning again.
        assert len(cluster.objects("terraformruns", sandbox)) == 1
        # ... and a acts on it: a spec change is answered by a (the only shard holding the layer).
        response = cluster.http.patch(
            f"/apis/{ann.API_VERSION}/namespaces/{sandbox}/terraformlayers/app",
            json={"spec": {"repository": {"name": "gone"}}}, headers={"Content-Type": "application/merge-patch+json"})
        assert response.status_code == 200, response.text

        def reported() -> bool:
            conditions = (cluster.layer(sandbox).get("status") or {}).get("conditions") or ()
            return any(c.get("reason") == "RepositoryNotFound" and f"{sandbox}/gone does not exist"
                       in c.get("message", "") for c in conditions)

        wait_for(reported, 20, interval=0.2, what="a to report the moved layer's missing repository")
        assert "belongs to shard 'a'" in b.log.read_text()  # b still matches team-a-*, and leaves it to a
    finally:
        a.stop()
        b.stop()
