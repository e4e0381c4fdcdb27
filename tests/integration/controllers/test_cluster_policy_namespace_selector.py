"""A ClusterTerraformPlanPolicy's `namespaceSelector` against the namespaces' real labels (docs/architecture.md §5.9,
§24).

The policy book read a layer's namespace at `/api/v1/namespaces/<ns>/namespaces` (a path that names no object): the
API's 404 read as "no labels", so a mandatory cluster policy selecting `env: prod` judged no layer at all, and a
tenant's plans in a production namespace were applied without it. The book's own read, against the emulator.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.controllers.planpolicy.book import PolicyBook
from burrito_py.kube.client import Kube


def cluster_policy(name: str, selector: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": ann.API_VERSION, "kind": "ClusterTerraformPlanPolicy",
            "metadata": {"name": name, "resourceVersion": "1"},
            "spec": {"enforcement": "mandatory", "namespaceSelector": selector,
                     "rules": [{"name": "no-iam", "cel": {"expression": "!change.type.startsWith('aws_iam_')"}}]}}


def layer_in(namespace: str) -> dict[str, Any]:
    return {"apiVersion": ann.API_VERSION, "kind": "TerraformLayer",
            "metadata": {"name": "app", "namespace": namespace},
            "spec": {"repository": {"name": "repo"}, "branch": "main", "path": "app"}}


def test_a_cluster_policy_judges_the_layers_of_the_namespaces_its_selector_picks(api: tuple[ApiServer, Path]) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        for name, env in (("shop-prod", "prod"), ("shop-dev", "dev")):
            admin.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": name, "labels": {"env": env}}})

    async def judged(namespace: str) -> list[str]:
        book = PolicyBook()
        book.cluster.observe(cluster_policy("prod-guard", {"matchLabels": {"env": "prod"}}))
        kube = await Kube.connect(str(kubeconfig))
        try:
            return [p.name for p in await book.for_layer(kube, layer_in(namespace))]
        finally:
            await kube.close()

    assert asyncio.run(judged("shop-prod")) == ["prod-guard"]
    assert asyncio.run(judged("shop-dev")) == []


def test_attack_labels_the_controllers_cannot_read_never_let_a_plan_pass_unjudged(
        api: tuple[ApiServer, Path], tmp_path: Path) -> None:
    """The namespace's labels cannot be read (here the controllers' account lacks `get namespaces`, as after a
    chart edit or an API outage; before any read succeeded): the book took that for "no labels", and a mandatory
    policy selecting `env: prod` judged nothing. Now a selector it cannot evaluate picks the namespace: the plan is
    judged rather than applied unjudged."""
    import shutil

    from burrito_local.identity import ensure_service_account, request_token, set_kubeconfig_token
    from burrito_local.kube_tokens import API_AUDIENCES

    server, kubeconfig = api
    with admin_client(server.url) as admin:
        admin.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": "shop-prod", "labels": {"env": "prod"}}})
        ensure_service_account(admin, "burrito-system", "no-namespaces")
        token = request_token(admin, "burrito-system", "no-namespaces", list(API_AUDIENCES))
    blind = tmp_path / "blind.kubeconfig"
    shutil.copy(kubeconfig, blind)
    set_kubeconfig_token(blind, token)

    async def judged() -> list[str]:
        book = PolicyBook()
        book.cluster.observe(cluster_policy("prod-guard", {"matchLabels": {"env": "prod"}}))
        kube = await Kube.connect(str(blind))
        try:
            return [p.name for p in await book.for_layer(kube, layer_in("shop-prod"))]
        finally:
            await kube.close()

    assert asyncio.run(judged()) == ["prod-guard"]
