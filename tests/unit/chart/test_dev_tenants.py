"""`burrito-py dev` gives every namespace its manifests use the runner ServiceAccount (issue 11, item 9): an
AGL instance in a tenant namespace gets its layer there, and its runs need `burrito-py-runner` there."""

from __future__ import annotations

from pathlib import Path

from burrito_local.dev import RELEASE, RELEASE_NAMESPACE, DevOptions, dev_values, tenant_namespaces

from burrito_py.chart.chart import render_chart


def test_the_manifests_namespaces_are_tenants_with_a_runner_service_account(tmp_path: Path) -> None:
    docs = [
        {"kind": "TerraformRepository", "metadata": {"name": "modules", "namespace": "default"}},
        {"kind": "Bucket", "metadata": {"name": "photos", "namespace": "team-a"}},
        {"kind": "ApplicationDefinition", "metadata": {"name": "buckets"}},
        {"kind": "Namespace", "metadata": {"name": "team-b"}},
    ]
    assert tenant_namespaces(docs) == ["default", "team-a", "team-b"]
    assert tenant_namespaces([]) == ["default"]
    values = dev_values(DevOptions(tmp_path, tmp_path / "kubeconfig"), [], tenant_namespaces(docs))
    objects = render_chart(values, RELEASE, RELEASE_NAMESPACE)
    accounts = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects if o["kind"] == "ServiceAccount"}
    for namespace in ("default", "team-a", "team-b"):
        assert (namespace, "burrito-py-runner") in accounts
        assert any(o["kind"] == "RoleBinding" and o["metadata"]["namespace"] == namespace
                   and o["subjects"][0]["name"] == "burrito-py-runner" for o in objects)
    created = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    assert created == {"team-a", "team-b"}, "the chart creates the tenant namespaces dev needs, not default"
