"""`controllers.shards`: one controllers Deployment (and leader Lease name) per shard, all under the one
ServiceAccount, each pod's settings naming its shard and watching that shard's namespaces; bad values fail
naming the value and the rule."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from burrito_py.chart.chart import ChartRenderError, render_chart
from burrito_py.chart.values import ChartValues
from burrito_py.controllers.settings import ControllerSettings
from tests.unit.chart.rendering import NAMESPACE, RELEASE, find, rendered


def _controllers(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind
            and o["metadata"]["labels"].get("app.kubernetes.io/component") == "controllers"]


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def test_one_deployment_per_shard_under_one_service_account() -> None:
    objects = rendered("shards")
    deployments = _controllers(objects, "Deployment")
    assert [d["metadata"]["name"] for d in deployments] == [f"{RELEASE}-controllers-a", f"{RELEASE}-controllers-b"]
    assert [s["metadata"]["name"] for s in _controllers(objects, "ServiceAccount")] == [f"{RELEASE}-controllers"]
    for deployment, shard in zip(deployments, "ab", strict=True):
        pod = deployment["spec"]["template"]
        assert pod["spec"]["serviceAccountName"] == f"{RELEASE}-controllers"
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector["burrito-py.io/shard"] == shard  # two Deployments never select each other's pods
        assert selector.items() <= pod["metadata"]["labels"].items()
        env = {e["name"]: e.get("value") for e in _container(deployment)["env"]}
        assert env["BURRITO_PY_SHARD"] == shard
        assert env["BURRITO_PY_LEADER_ELECTION_NAME"] == f"{RELEASE}-controllers-{shard}"  # its own Lease
        assert _container(deployment)["envFrom"] == [{"configMapRef": {"name": f"{RELEASE}-controllers"}}]
    pdbs = _controllers(objects, "PodDisruptionBudget")  # 2 replicas per shard: one budget per shard
    assert [(p["metadata"]["name"], p["spec"]["selector"]["matchLabels"]["burrito-py.io/shard"]) for p in pdbs] == [
        (f"{RELEASE}-controllers-a", "a"), (f"{RELEASE}-controllers-b", "b")]
    # One metrics Service over every shard's pods (Prometheus scrapes each pod).
    service = find(objects, "Service", f"{RELEASE}-controllers-metrics")
    assert "burrito-py.io/shard" not in service["spec"]["selector"]


def test_each_shard_pod_gets_the_settings_of_its_shard(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = rendered("shards")
    config = find(objects, "ConfigMap", f"{RELEASE}-controllers")["data"]
    watched = {}
    for deployment in _controllers(objects, "Deployment"):
        with monkeypatch.context() as env:
            for key, value in config.items():
                env.setenv(key, value)
            for entry in _container(deployment)["env"]:
                if entry["name"].startswith("BURRITO_PY_") and "value" in entry:
                    env.setenv(entry["name"], entry["value"])
            settings = ControllerSettings()
        watched[settings.shard] = settings.namespaces
        scope = settings.scope()
        owned = [ns for ns in ("team-a-prod", "team-a-sandbox", "team-b", "payments") if scope.owns(ns)]
        assert owned == {"a": ["team-a-prod"], "b": ["team-a-sandbox", "team-b"]}[settings.shard]
        assert scope.cluster_work is (settings.shard == "a")
    assert watched == {"a": ["team-a-*,!*-sandbox"], "b": ["team-*"]}


def test_unsharded_is_the_one_controllers_deployment() -> None:
    objects = rendered("cluster-mode")
    assert [d["metadata"]["name"] for d in _controllers(objects, "Deployment")] == [f"{RELEASE}-controllers"]
    deployment = _controllers(objects, "Deployment")[0]
    assert "burrito-py.io/shard" not in deployment["spec"]["selector"]["matchLabels"]
    assert not [e for e in _container(deployment)["env"] if e["name"] == "BURRITO_PY_SHARD"]
    assert "BURRITO_PY_SHARDS" not in find(objects, "ConfigMap", f"{RELEASE}-controllers")["data"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"controllers": {"shards": [{"name": "a", "namespaces": "team-*"}]}},
         "controllers.shards needs clusterMode: true"),
        ({"clusterMode": True, "controllers": {"shards": [{"name": "a", "namespaces": "x"},
                                                          {"name": "a", "namespaces": "y"}]}},
         'controllers.shards: shard name "a" is listed more than once'),
        ({"clusterMode": True, "controllers": {"shards": [{"name": "Team_A", "namespaces": "x"}]}},
         "at '/controllers/shards/0/name': 'Team_A' does not match pattern"),
        ({"clusterMode": True, "controllers": {"shards": [{"name": "a"}]}},
         "at '/controllers/shards/0': missing property 'namespaces'"),
        ({"clusterMode": True, "controllers": {"shards": [{"name": "a", "namespaces": "x", "labels": "y"}]}},
         "additional properties 'labels' not allowed"),
    ],
)
def test_bad_shards_fail_the_install_naming_the_value(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ChartRenderError, match=message.replace("(", r"\(")):
        render_chart(values, RELEASE, NAMESPACE)


@pytest.mark.parametrize(
    ("shards", "message"),
    [
        ([{"name": "a", "namespaces": "x"}, {"name": "a", "namespaces": "y"}],
         "shard name(s) 'a' listed more than once"),
        ([{"name": "a", "namespaces": "x,,y"}], "'x,,y' has an empty glob"),
        ([{"name": "a", "namespaces": []}], "at least one namespace pattern is needed"),
        ([{"name": "a-", "namespaces": "x"}], "String should match pattern"),
    ],
)
def test_the_values_model_names_the_shard_field(shards: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValidationError) as failure:
        ChartValues.model_validate({"clusterMode": True, "controllers": {"shards": shards}})
    assert "controllers.shards" in str(failure.value) and message in str(failure.value)


def test_notes_list_the_shards_and_say_what_no_shard_matches() -> None:
    from burrito_py.chart.chart import render_chart_files
    from tests.unit.chart.rendering import VALUE_SETS

    files = render_chart_files(VALUE_SETS["shards"], RELEASE, NAMESPACE)
    notes = next(text for path, text in files.items() if path.endswith("NOTES.txt"))
    assert "one no shard matches is not reconciled" in notes
    assert "  a: team-a-*,!*-sandbox\n  b: team-*\n" in notes
