"""Issue 24, finding 12 (metrics): no component's `/metrics` is readable by anyone on the network. The datastore and
the controllers serve it only to a bearer token the Kubernetes API accepts whose user may `get` the non-resource
URL /metrics (the emulator answers the TokenReviews and SubjectAccessReviews with its RBAC); the server serves none.
Before the fix, a runner pod's token, or no token at all, read them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.identity import ensure_service_account, grant_runner_access, request_token

from burrito_py.datastore.in_process import free_port, running_datastore
from burrito_py.kube.metrics_auth import MetricsGate, serve_metrics
from burrito_py.server.serving import running_server
from burrito_py.server.settings import ServerSettings
from tests.support.emulator import running_apiserver

RBAC = "/apis/rbac.authorization.k8s.io/v1"
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"


@dataclass
class World:
    api: ApiServer
    kubeconfig: Path
    tokens: dict[str, str]
    datastore: str
    controllers: str
    server: str


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("metrics")
    kubeconfig = tmp / "kubeconfig"
    with running_apiserver(tmp, kubeconfig=kubeconfig) as api, httpx.Client(
            base_url=api.url, headers=api.admin_headers, timeout=30) as kube:
        runner = grant_runner_access(kube, "team-a")
        assert runner.endswith(":burrito-py-runner")
        for name in ("prometheus", "someone"):
            ensure_service_account(kube, "monitoring", name)
        # What the chart's <release>-metrics-reader ClusterRole grants, bound to Prometheus's account.
        kube.post(f"{RBAC}/clusterroles", json={"metadata": {"name": "metrics-reader"}, "rules": [
            {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}).raise_for_status()
        kube.post(f"{RBAC}/clusterrolebindings", json={
            "metadata": {"name": "metrics-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]},
        ).raise_for_status()
        tokens = {
            # Prometheus's own service-account token: the API's audience.
            "prometheus": request_token(kube, "monitoring", "prometheus", [API_AUDIENCE]),
            "someone": request_token(kube, "monitoring", "someone", [API_AUDIENCE]),
            "runner": request_token(kube, "team-a", "burrito-py-runner", ["burrito-py", API_AUDIENCE]),
        }
        port = free_port()
        serve_metrics(port, "127.0.0.1", lambda: MetricsGate.for_kubeconfig(str(kubeconfig)))  # the controllers'
        settings = ServerSettings(host="127.0.0.1", port=free_port(), kubeconfig=kubeconfig, auth_enabled=True,
                                  datastore_url="http://127.0.0.1:9")
        with running_datastore(tmp / "data", auth_enabled=True, kubeconfig=kubeconfig) as datastore, \
                running_server(settings) as server:
            yield World(api, kubeconfig, tokens, datastore, f"http://127.0.0.1:{port}", server)


def _get(url: str, identity: str | None, world: World) -> httpx.Response:
    headers = {"Authorization": f"Bearer {world.tokens[identity]}"} if identity else {}
    return httpx.get(f"{url}/metrics", headers=headers, timeout=30)


@pytest.mark.parametrize("component", ["datastore", "controllers"])
def test_metrics_need_a_token_allowed_to_get_them(world: World, component: str) -> None:
    url = getattr(world, component)
    anonymous = _get(url, None, world)
    assert anonymous.status_code == 401 and "# HELP" not in anonymous.text
    for identity in ("runner", "someone"):  # tenant code's token; anyone else's
        refused = _get(url, identity, world)
        assert refused.status_code == 403, (identity, refused.text)
        assert "may not get /metrics" in refused.json()["error"] and "# HELP" not in refused.text
    garbage = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer not-a-token"}, timeout=30)
    assert garbage.status_code == 401
    allowed = _get(url, "prometheus", world)
    assert allowed.status_code == 200 and "# HELP" in allowed.text
    assert allowed.headers["content-type"].startswith("text/plain")


def test_the_server_serves_no_metrics(world: World) -> None:
    assert httpx.get(f"{world.server}/metrics", timeout=30).status_code == 404
    assert _get(world.server, "prometheus", world).status_code == 404


def test_a_reviewed_token_is_remembered(world: World) -> None:
    world.api.clear_requests()
    for _ in range(5):
        assert _get(world.controllers, "prometheus", world).status_code == 200
    reviews = [r for r in list(world.api.requests) if r.path.endswith(("/tokenreviews", "/subjectaccessreviews"))]
    assert len(reviews) <= 2
