"""Attack: a tenant user who may edit a layer points it, while its run is running, at another namespace's
TerraformRepository (`spec.repository.namespace`), and the tenant code in the runner then reads that repository's
source archives with its own pod-bound token. The datastore took the repository from the layer as it is now, whatever
the operator allows; it now gives a runner another namespace's sources only with
`BURRITO_PY_DATASTORE_AUTH_ALLOW_CROSS_NAMESPACE_REPOSITORIES` (the chart sets it from the controllers'
`allowCrossNamespaceRepositories`): docs/architecture.md §10.2, §24."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from burrito_py.api import annotations as ann
from burrito_py.datastore.client import DatastoreClient
from tests.integration.datastore.auth_platform import NS, AuthPlatform, running_auth_platform

OTHER_NS = "team-secret"
SECRET_ARCHIVE = b"team-secret's private infrastructure code"
REVISION = "0123456789abcdef0123456789abcdef01234567"
SOURCE = f"/api/v1/repositories/{OTHER_NS}/private/revisions/{REVISION}/source"


def _point_other_layer_at(platform: AuthPlatform, namespace: str, name: str) -> None:
    platform.http.patch(f"/apis/{ann.API_VERSION}/namespaces/{NS}/terraformlayers/other",
                        json={"spec": {"repository": {"name": name, "namespace": namespace}}},
                        headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()


def _seed_other_namespace(platform: AuthPlatform) -> None:
    platform.http.post("/api/v1/namespaces", json={"metadata": {"name": OTHER_NS}}).raise_for_status()
    with DatastoreClient(platform.url, token=platform.admin_token) as store:
        store.put_source(OTHER_NS, "private", REVISION, "tree1", SECRET_ARCHIVE)


@pytest.fixture
def strict(tmp_path: Path) -> Iterator[AuthPlatform]:
    with running_auth_platform(tmp_path) as platform:
        _seed_other_namespace(platform)
        yield platform


@pytest.fixture
def allowing(tmp_path: Path) -> Iterator[AuthPlatform]:
    with running_auth_platform(tmp_path, auth_allow_cross_namespace_repositories=True) as platform:
        _seed_other_namespace(platform)
        yield platform


def test_attack_a_runner_reads_no_other_namespaces_sources_by_a_layer_repointed_under_it(strict: AuthPlatform) -> None:
    _point_other_layer_at(strict, OTHER_NS, "private")
    token = strict.runner_token("other-plan-1-1")  # a token not reviewed yet: the layer as it is now
    answer = httpx.get(strict.url + SOURCE, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert answer.status_code == 403, answer.content[:200]
    assert SECRET_ARCHIVE not in answer.content
    assert "another namespace" in answer.json()["error"]
    # Its own namespace's repositories still: pointed back, the runner reads its layer's repository.
    _point_other_layer_at(strict, NS, "repo-b")
    token = strict.runner_token("other-plan-1-1")
    own = httpx.get(f"{strict.url}/api/v1/repositories/{NS}/repo-b/revisions/rev1/source",
                    headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert own.status_code == 200, own.text


def _repository(platform: AuthPlatform, shared: list[str] | None) -> None:
    """team-secret's TerraformRepository `private`, shared with `shared` (None: no allowedNamespaces)."""
    platform.http.post(f"/apis/{ann.API_VERSION}/namespaces/{OTHER_NS}/terraformrepositories", json={
        "apiVersion": ann.API_VERSION, "kind": "TerraformRepository", "metadata": {"name": "private"},
        "spec": {"repository": {"url": "https://git.example/team-secret/private.git"},
                 **({"allowedNamespaces": shared} if shared is not None else {})}}).raise_for_status()


def test_attack_where_cross_namespace_repositories_are_allowed_a_runner_reads_only_repositories_shared_with_it(
        allowing: AuthPlatform) -> None:
    """With repositories of other namespaces allowed (for a platform's shared module repository), any layer could
    name any namespace's repository, and its runner read that team's source archives. Now only a repository whose
    owners list the layer's namespace in `spec.allowedNamespaces` (or `*`), read at the token's review."""
    _point_other_layer_at(allowing, OTHER_NS, "private")
    token = allowing.runner_token("other-plan-1-1")
    missing = httpx.get(allowing.url + SOURCE, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert missing.status_code == 403 and SECRET_ARCHIVE not in missing.content
    _repository(allowing, ["team-c"])  # shared, but not with this runner's namespace
    token = allowing.runner_token("other-plan-1-1")  # a fresh token: reviewed with the repository as it is now
    answer = httpx.get(allowing.url + SOURCE, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert answer.status_code == 403 and SECRET_ARCHIVE not in answer.content, answer.content[:200]
    assert f"not shared with namespace {NS}" in answer.json()["error"]


def test_where_the_operator_allows_it_and_the_repository_is_shared_the_runner_reads_its_layers(
        allowing: AuthPlatform) -> None:
    _repository(allowing, [NS])
    _point_other_layer_at(allowing, OTHER_NS, "private")
    token = allowing.runner_token("other-plan-1-1")
    answer = httpx.get(allowing.url + SOURCE, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert answer.status_code == 200 and answer.content == SECRET_ARCHIVE
