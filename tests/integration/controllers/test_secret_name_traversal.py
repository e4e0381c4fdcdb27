"""Attack: a tenant of team-a names, in a field that holds a Secret's name, a path to team-b's Secret
(docs/architecture.md §8, §9, §24).

The controllers read the Secrets that tenants' objects name, with a grant in every tenant namespace, at
`/api/v1/namespaces/<own namespace>/secrets/<name>`. A name `../../team-b/secrets/db` (or its percent-encoded
`%2e%2e`) was put in that path as it was: the HTTP client resolves the dot segments, so the controllers read
team-b's Secret and gave its values to team-a's runner (`varsFrom`), used its git credentials for team-a's
repository (`secretName`), or its webhook URL for team-a's notifier. Objects are written raw, as one stored before
the CRDs' name patterns; the controllers' own reads, against the emulator, with team-b's Secret in place.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar, cast

import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api.errors import InvalidSpec
from burrito_py.api.layer import TerraformLayer
from burrito_py.api.notifier import TerraformNotifier
from burrito_py.api.repository import TerraformRepository
from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.notifications import _target
from burrito_py.controllers.layer.run_inputs import read_sources
from burrito_py.controllers.repository.reconcile import credentials_of
from burrito_py.controllers.repository.webhook_keys import webhook_entry
from burrito_py.git.credentials import CredentialsError
from burrito_py.kube.client import Kube, UnsafePathSegment, path
from tests.support.runner_overrides import settings

T = TypeVar("T")
STOLEN = "team-b-database-password"
# The ways a name leaves its namespace's path: dot segments, and the same percent-encoded.
TRAVERSALS = ("../../team-b/secrets/db", "%2e%2e/%2e%2e/team-b/secrets/db", "..%2F..%2Fteam-b%2Fsecrets%2Fdb")


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def team_b_secret(admin: Any) -> None:
    """team-b's Secret, which team-a may not read: a password, git credentials allowed to github.com, a webhook
    URL and key."""
    for namespace in ("team-a", "team-b"):
        admin.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": namespace}})
    admin.post("/api/v1/namespaces/team-b/secrets", json={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "team-b"},
        "data": {"password": b64(STOLEN), "token": b64(STOLEN), "allowedHosts": b64("github.com"),
                 "webhookSecret": b64(STOLEN), "url": b64("https://hooks.example.com/team-b")}}).raise_for_status()


def with_kube(kubeconfig: Path, work: Callable[[Context], Awaitable[T]]) -> T:
    async def run() -> T:
        kube = await Kube.connect(str(kubeconfig))
        try:
            return await work(Context(settings=settings(), kube=kube))
        finally:
            await kube.close()

    return asyncio.run(run())


@pytest.mark.parametrize("name", TRAVERSALS)
def test_attack_vars_from_cannot_read_another_namespaces_secret(api: tuple[ApiServer, Path], name: str) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        team_b_secret(admin)
    layer = {"metadata": {"name": "app", "namespace": "team-a"},
             "spec": {"varsFrom": [{"kind": "Secret", "name": name}]}}

    sources = with_kube(kubeconfig, lambda ctx: read_sources(ctx, layer))

    assert STOLEN not in str(sources.values), "team-b's Secret reached team-a's runner"
    assert sources.error is not None and sources.error.startswith("spec.varsFrom[0]: name "), sources.error
    assert "an object name of the same namespace" in sources.error


@pytest.mark.parametrize("name", TRAVERSALS)
def test_attack_repository_credentials_cannot_come_from_another_namespace(
    api: tuple[ApiServer, Path], name: str,
) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        team_b_secret(admin)

    # team-b's credentials would have fetched team-b's private repository for team-a.
    with pytest.raises(CredentialsError, match=r"^spec.repository.secretName: .*an object name of the same namespace"):
        with_kube(kubeconfig, lambda ctx: credentials_of(ctx, "team-a", name,
                                                         "https://github.com/team-b/private.git"))
    repository = {"metadata": {"name": "repo", "namespace": "team-a", "uid": "u"},
                  "spec": {"repository": {"url": "https://github.com/team-b/private.git", "secretName": name}}}
    entry, condition = with_kube(kubeconfig, lambda ctx: webhook_entry(ctx.kube, repository))
    assert entry is None and condition.reason == "SecretNameInvalid", condition


@pytest.mark.parametrize("name", TRAVERSALS)
def test_attack_a_notifier_cannot_use_another_namespaces_webhook(api: tuple[ApiServer, Path], name: str) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        team_b_secret(admin)
    # As the controllers would hold one stored before the CRD's name pattern (the model would refuse it now).
    ref = SimpleNamespace(name=name, key="url")
    notifier = SimpleNamespace(namespace="team-a", name="n", spec=SimpleNamespace(
        slack=SimpleNamespace(url_secret_ref=ref), teams=None, webhook=None, target_kind="slack"))

    with pytest.raises(ValueError, match="an object name of the same namespace"):
        with_kube(kubeconfig, lambda ctx: _target(ctx.kube, cast(Any, notifier)))


@pytest.mark.parametrize("name", TRAVERSALS)
def test_the_api_refuses_such_a_name_when_it_is_written(name: str) -> None:
    for kind, body in (
        (TerraformLayer, {"spec": {"repository": {"name": "repo"}, "branch": "main", "path": "app",
                                   "varsFrom": [{"kind": "Secret", "name": name}]}}),
        (TerraformLayer, {"spec": {"repository": {"name": "repo"}, "branch": "main", "path": "app",
                                   "writeOutputsToSecret": {"name": name}}}),
        (TerraformLayer, {"spec": {"repository": {"name": name}, "branch": "main", "path": "app"}}),
        (TerraformRepository, {"spec": {"repository": {"url": "https://github.com/a/b.git", "secretName": name}}}),
        (TerraformNotifier, {"spec": {"slack": {"urlSecretRef": {"name": name, "key": "url"}}}}),
    ):
        with pytest.raises(InvalidSpec, match="an object name of the same namespace"):
            kind.from_object({"apiVersion": kind.model_fields["api_version"].default, "kind": kind.KIND,
                              "metadata": {"name": "x", "namespace": "team-a"}, **body})


@pytest.mark.parametrize("name", [*TRAVERSALS, "..", ".", "db?watch=true", "db#x"])
def test_no_api_path_is_made_of_a_name_that_is_not_one_segment(name: str) -> None:
    with pytest.raises(UnsafePathSegment):
        path("v1", "secrets", "team-a", name)
    with pytest.raises(UnsafePathSegment):
        path("v1", "secrets", name, "db")
    assert path("v1", "secrets", "team-a", "db.v2-1") == "/api/v1/namespaces/team-a/secrets/db.v2-1"
