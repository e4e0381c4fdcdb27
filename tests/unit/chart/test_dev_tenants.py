"""`burrito-py dev` gives every namespace its manifests use the runner ServiceAccount (issue 11, item 9): an
AGL instance in a tenant namespace gets its layer there, and its runs need `burrito-py-runner` there."""

from __future__ import annotations

import json
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


def test_dev_caches_turns_on_both_caches_in_chart_mode_only(tmp_path: Path) -> None:
    """`burrito-py dev --caches`: the chart's provider and tool caches on, so runner pods are pointed at the
    datastore's HTTPS mirrors as on a cluster (issue 27 item 6)."""
    import pytest

    options = DevOptions(tmp_path, tmp_path / "kubeconfig", caches=True)
    objects = render_chart(dev_values(options), RELEASE, RELEASE_NAMESPACE)
    [controllers] = [o for o in objects
                     if o["kind"] == "ConfigMap" and o["metadata"]["name"] == f"{RELEASE}-controllers"]
    assert controllers["data"]["BURRITO_PY_TOOL_MIRROR_URL"].endswith(":8443/tools/v1/")
    assert controllers["data"]["BURRITO_PY_PROVIDER_MIRROR_URL"].endswith(":8443/providers/v1/")
    plain = render_chart(dev_values(DevOptions(tmp_path, tmp_path / "kubeconfig")), RELEASE, RELEASE_NAMESPACE)
    # (the CRDs name the mirrors' variables: an override may not set them)
    assert not any("MIRROR_URL" in json.dumps(o) for o in plain if o["kind"] != "CustomResourceDefinition")
    with pytest.raises(ValueError, match="--caches needs --mode chart"):
        DevOptions(tmp_path, tmp_path / "kubeconfig", caches=True, mode="in-process", cluster="emulator")


def test_dev_runs_one_controllers_replica_unless_asked_for_the_charts_two(tmp_path: Path) -> None:
    """One node runs every pod of `dev`: a standby guards against nothing there and its start-up competed with
    the leader's for the CPU (issue 31 item 4). The failover test and bench ask for the chart's 2."""
    import pytest

    def controllers(options: DevOptions) -> tuple[int, int]:
        objects = render_chart(dev_values(options), RELEASE, RELEASE_NAMESPACE)
        [deployment] = [o for o in objects if o["kind"] == "Deployment"
                        and o["metadata"]["name"] == f"{RELEASE}-controllers"]
        budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
        return deployment["spec"]["replicas"], len(budgets)

    assert controllers(DevOptions(tmp_path, tmp_path / "kubeconfig")) == (1, 0)
    assert controllers(DevOptions(tmp_path, tmp_path / "kubeconfig", controllers_replicas=2)) == (2, 1)
    # The chart's own default stays 2: test_chart_render.test_two_controllers_replicas_with_leader_election_…
    with pytest.raises(ValueError, match="controllers_replicas must be at least 1"):
        DevOptions(tmp_path, tmp_path / "kubeconfig", controllers_replicas=0)
