"""Issue 11, items 15 and 16 (security): tenants are kept to their namespace. With the controllers' defaults, a
`file://` repository is refused (it would read the controllers' filesystem, their git cache included), a layer
may not use another namespace's repository, and a TerraformRun may not work for another namespace's layer:
each is refused with a condition naming the field, and none of them ever gets a runner pod or a Lease. With the
chart's ValidatingAdmissionPolicy installed, the API itself refuses the cross-namespace run (422)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from burrito_py.api import annotations as ann
from burrito_py.chart.admission_policy import MESSAGE
from tests.e2e.conftest import Platform, running_platform
from tests.support.emulator import wait_for
from tests.support.git_repos import TestRepo
from tests.support.real_cluster import RealCluster


@pytest.fixture
def strict(tmp_path: Path, kubeconfig_path: Path, real_cluster: RealCluster) -> Iterator[tuple[Platform, str]]:
    """The controllers as installed by the chart: file:// and cross-namespace repositories off; without the
    admission policy (a cluster older than 1.30, or `admissionPolicy.enabled: false`: the session's bindings skip
    both namespaces), so the controllers' own checks are what refuses a forged run. The platform's namespace is the
    tenant's (the controllers watch it); a second one holds the other team's repository and layer."""
    with running_platform(tmp_path, kubeconfig_path, admission_policy=False, allow_file_repositories=False,
                          cluster=real_cluster) as p:
        other = real_cluster.new_namespace("other", admission_policy=False)
        try:
            yield p, other
        finally:
            real_cluster.remove_namespace(other)


def create(platform: Platform, plural: str, namespace: str, name: str, spec: dict[str, Any]) -> None:
    kind = {"terraformrepositories": "TerraformRepository", "terraformlayers": "TerraformLayer",
            "terraformruns": "TerraformRun"}[plural]
    platform.custom.create_namespaced_custom_object(ann.GROUP, ann.VERSION, namespace, plural, {
        "apiVersion": ann.API_VERSION, "kind": kind, "metadata": {"name": name, "namespace": namespace},
        "spec": spec})


def get(platform: Platform, plural: str, namespace: str, name: str) -> dict[str, Any]:
    body: dict[str, Any] = platform.custom.get_namespaced_custom_object(ann.GROUP, ann.VERSION, namespace, plural,
                                                                       name)
    return body


def condition(body: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (body.get("status") or {}).get("conditions") or () if c["type"] == kind), None)


def wait_condition(platform: Platform, plural: str, namespace: str, name: str, kind: str,
                   reason: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        c = condition(get(platform, plural, namespace, name), kind)
        return c if c is not None and c["reason"] == reason else None

    result: dict[str, Any] = wait_for(found, 30, 0.1, f"{plural} {namespace}/{name} {kind} {reason}")
    return result


def events(platform: Platform, namespace: str, name: str) -> list[str]:
    items = platform.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return [f"{e.reason}: {e.message}" for e in items]


def wait_event(platform: Platform, namespace: str, name: str, prefix: str) -> None:
    """An Event is posted beside the condition it repeats, not before it: a test that has seen the condition waits
    for the Event (the clean-clone CI once listed the events first)."""
    wait_for(lambda: any(e.startswith(prefix) for e in events(platform, namespace, name)), 30, 0.1,
             f"an Event {prefix!r} on {namespace}/{name}")


def test_file_urls_and_cross_namespace_references_are_refused(strict: tuple[Platform, str], repo: TestRepo):
    platform, other = strict
    tenant = platform.namespace
    # A tenant's file:// repository (here: a real local repository the controllers could read).
    create(platform, "terraformrepositories", tenant, "local", {"repository": {"url": repo.url}})
    create(platform, "terraformlayers", tenant, "app", {
        "repository": {"name": "local"}, "branch": "main", "path": "layers/app", "terraform": {"version": "1.11.4"}})
    synced = wait_condition(platform, "terraformrepositories", tenant, "local", "Synced", "FileURLNotAllowed")
    assert synced["status"] == "False"
    assert "spec.repository.url" in synced["message"] and "file:// repository URLs are disabled" in (
        synced["message"])
    ready = wait_condition(platform, "terraformlayers", tenant, "app", "Ready", "RepositoryNotAllowed")
    assert ready["message"].startswith(f"spec.repository: TerraformRepository {tenant}/local: spec.repository.url")
    wait_event(platform, tenant, "local", "FileURLNotAllowed: spec.repository.url")

    # A tenant's layer using another namespace's repository.
    create(platform, "terraformrepositories", other, "private", {"repository": {"url": repo.url}})
    create(platform, "terraformlayers", tenant, "thief", {
        "repository": {"name": "private", "namespace": other}, "branch": "main", "path": "layers/app"})
    ready = wait_condition(platform, "terraformlayers", tenant, "thief", "Ready", "CrossNamespaceRepository")
    assert ready["message"].startswith(f"spec.repository.namespace: '{other}' is not the layer's namespace "
                                       f"'{tenant}'")
    assert ann.BRANCH_COMMIT not in (get(platform, "terraformlayers", tenant, "thief")["metadata"].get("annotations")
                                     or {})

    # A run in the tenant namespace for the other namespace's layer.
    create(platform, "terraformlayers", other, "victim", {
        "repository": {"name": "private"}, "branch": "main", "path": "layers/app"})
    create(platform, "terraformruns", tenant, "forged", {
        "action": "apply", "layer": {"name": "victim", "namespace": other, "revision": "0" * 40}})
    refused = wait_condition(platform, "terraformruns", tenant, "forged", "HasSucceeded", "CrossNamespaceLayer")
    assert refused["message"] == (f"spec.layer.namespace: '{other}' is not the run's namespace '{tenant}': a "
                                  "TerraformRun may only work for a layer of its own namespace")
    assert get(platform, "terraformruns", tenant, "forged")["status"]["state"] == "Failed"
    wait_event(platform, tenant, "forged", "RunRefused: spec.layer.namespace")

    # Nothing ran: no runner pod in either namespace, no Lease taken, and the runs are left alone.
    with platform.api_http() as http:
        for namespace in (tenant, other):
            assert http.get(f"/api/v1/namespaces/{namespace}/pods").json()["items"] == []
            leases = http.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases").json()["items"]
            # The controllers' own leader Lease lives in the test's namespace (§22.8); no layer's Lease anywhere.
            assert [lease["metadata"]["name"] for lease in leases if "victim" in lease["metadata"]["name"]] == []
    # The refusal is written once: later reconciles (every run's) change nothing.
    before = get(platform, "terraformruns", tenant, "forged")["metadata"]["resourceVersion"]
    time.sleep(2)
    assert get(platform, "terraformruns", tenant, "forged")["metadata"]["resourceVersion"] == before


@pytest.fixture
def guarded(tmp_path: Path, kubeconfig_path: Path, real_cluster: RealCluster) -> Iterator[tuple[Platform, str]]:
    """The harness with the chart's run-namespace ValidatingAdmissionPolicy (its default), on the real control
    plane: kube-apiserver enforces it. A second namespace of the test's own is the tenant's."""
    with running_platform(tmp_path, kubeconfig_path, cluster=real_cluster) as p:
        tenant = real_cluster.new_namespace("tenant")
        try:
            yield p, tenant
        finally:
            real_cluster.remove_namespace(tenant)


def test_the_api_refuses_a_cross_namespace_run_when_the_admission_policy_is_installed(
        guarded: tuple[Platform, str]) -> None:
    platform, tenant = guarded
    spec = {"action": "apply", "layer": {"name": "victim", "namespace": platform.namespace, "revision": "0" * 40}}
    with pytest.raises(ApiException) as refused:
        create(platform, "terraformruns", tenant, "forged", spec)
    assert refused.value.status == 422
    assert json.loads(refused.value.body)["message"] == (
        'terraformruns.terraform.burrito-py.io "forged" is forbidden: ValidatingAdmissionPolicy '
        f"'burrito-py-run-namespace' with binding 'burrito-py-run-namespace' denied request: {MESSAGE}")
    with platform.api_http() as http:
        assert http.get(f"/apis/{ann.API_VERSION}/namespaces/{tenant}/terraformruns").json()["items"] == []
        # A run for its own namespace's layer is admitted; moving it to another namespace's layer is not.
        create(platform, "terraformruns", tenant, "own", {**spec, "layer": {**spec["layer"], "namespace": tenant}})
        moved = http.patch(f"/apis/{ann.API_VERSION}/namespaces/{tenant}/terraformruns/own",
                           json={"spec": {"layer": {"namespace": platform.namespace}}},
                           headers={"Content-Type": "application/merge-patch+json"})
        assert moved.status_code == 422 and moved.json()["message"].endswith(MESSAGE)
        assert get(platform, "terraformruns", tenant, "own")["spec"]["layer"]["namespace"] == tenant
