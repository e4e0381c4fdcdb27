"""Rendering charts/burrito-py with the real Helm engine: every value set lints clean and validates against
the Kubernetes schemas; bad values fail naming the key; the config reaches each component as its settings."""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import kubernetes_validate.utils
import pytest
from kubernetes_validate.utils import latest_version

from burrito_py.chart.chart import CHART_DIR, ChartRenderError, render_chart
from burrito_py.chart.values import ChartValues
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.datastore.app import DatastoreSettings
from burrito_py.datastore.backends import StorageSettings
from burrito_py.outbound import OutboundPolicy
from burrito_py.server.settings import ServerSettings
from tests.unit.chart.rendering import NAMESPACE, RELEASE, VALUE_SETS, find, rendered

KUBERNETES_VERSIONS = ("1.30", latest_version())
# Kinds kubernetes-validate has no schema for (not built into Kubernetes): prometheus-operator's, cert-manager's.
NO_SCHEMA = {"ServiceMonitor", "PrometheusRule", "Certificate", "Issuer"}


def test_the_required_value_sets_exist() -> None:
    assert {"default", "tenants", "cluster-mode", "s3-encryption", "ha", "network-policy", "crds-off",
            "monitoring-ingress", "local-default-tenant", "caches", "caches-cert-manager"} <= set(VALUE_SETS)
    for values in VALUE_SETS.values():
        ChartValues.model_validate(values)  # the ci files are valid values, by the models too


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_lint_strict_reports_nothing(name: str) -> None:
    result = helm_python.lint(str(CHART_DIR), VALUE_SETS[name], strict=True, namespace=NAMESPACE)
    assert result["errors"] == []
    # Helm's only remark is informational (severity 1): "icon is recommended"; we have no icon to point at.
    assert [m for m in result["messages"] if m["severity"] > 1 or m["error"] != "icon is recommended"] == []


@pytest.fixture(scope="module")
def _schemas_read_once() -> Iterator[None]:
    """kubernetes-validate reads and parses its schema files on every call, megabytes of definitions for each
    object (2.3 s for one value set's 76 objects, 0.16 s with each file read once); they never change."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kubernetes_validate.utils, "schema_contents",
                      functools.cache(kubernetes_validate.utils.schema_contents))
        yield


@pytest.mark.usefixtures("_schemas_read_once")
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_validates_strictly(name: str, version: str) -> None:
    objects = rendered(name)
    assert objects
    skipped = set()
    for obj in objects:
        if obj["kind"] in NO_SCHEMA:
            skipped.add(obj["kind"])
            continue
        kubernetes_validate.validate(obj, version, strict=True)
    if name == "monitoring-ingress":
        assert skipped == {"ServiceMonitor"}
    if name == "caches":
        assert skipped == {"PrometheusRule"}
    if name == "caches-cert-manager":
        assert skipped == {"Certificate", "Issuer"}


def test_servicemonitor_shape() -> None:
    monitor = find(rendered("monitoring-ingress"), "ServiceMonitor", f"{RELEASE}-controllers")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = find(rendered("monitoring-ingress"), "Service", f"{RELEASE}-controllers-metrics")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s",
                                             "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"controlers": {"replicas": 2}}, "'controlers'"),
        ({"controllers": {"replicas": "two"}}, "/controllers/replicas"),
        ({"datastore": {"storage": {"s3": {"bukket": "x"}}}}, "'bukket'"),
        ({"tenants": [{"namespace": "team-a", "crate": True}]}, "'crate'"),
        ({"controllers": {"config": {"maxRetries": -1}}}, "/controllers/config/maxRetries"),
        ({"datastore": {"storage": {"backend": "gcs"}}}, "/datastore/storage/backend"),
    ],
)
def test_bad_values_fail_naming_the_key(values: dict[str, Any], named: str) -> None:
    with pytest.raises(ChartRenderError) as failure:
        render_chart(values, RELEASE, NAMESPACE)
    assert named in str(failure.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"datastore": {"storage": {"backend": "s3"}}}, "datastore.storage.s3.bucket is required"),
        ({"datastore": {"encryption": {"enabled": True}}}, "datastore.encryption.activeKeyId is required"),
        ({"datastore": {"replicas": 2}}, "datastore.replicas > 1 needs datastore.storage.backend: s3"),
        ({"server": {"ingress": {"enabled": True}}}, "server.ingress.hosts needs at least one host"),
    ],
)
def test_incoherent_values_fail_with_the_settings_rule(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ChartRenderError, match=message):
        render_chart(values, RELEASE, NAMESPACE)


def _config(objects: list[dict[str, Any]], component: str) -> dict[str, str]:
    data: dict[str, str] = find(objects, "ConfigMap", f"{RELEASE}-{component}")["data"]
    return data


def _settings_names(model: type[Any], prefix: str) -> set[str]:
    return {prefix + name.upper() for name in model.model_fields}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_config_variable_is_a_setting_that_parses(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The ConfigMaps hold only real BURRITO_PY_* settings, and the components' settings classes accept them."""
    objects = rendered(name)
    for component, models, prefix in (
        ("controllers", (ControllerSettings,), "BURRITO_PY_"),
        ("datastore", (DatastoreSettings, StorageSettings), "BURRITO_PY_DATASTORE_"),
        ("server", (ServerSettings,), "BURRITO_PY_SERVER_"),
    ):
        data = _config(objects, component)
        known = set().union(*(_settings_names(m, prefix) for m in models))
        assert set(data) <= known, f"{component}: not settings: {sorted(set(data) - known)}"
        files = _mounted_secret_files(objects, component, data, tmp_path / component)
        for pod_env in _deployment_envs(objects, component):  # what each Deployment adds (a shard's name)
            with monkeypatch.context() as env:
                for key, value in {**data, **pod_env, **files}.items():
                    env.setenv(key, value)
                for model in models:
                    model()  # raises on any value the component would refuse


def _mounted_secret_files(objects: list[dict[str, Any]], component: str, data: dict[str, str],
                          into: Path) -> dict[str, str]:
    """The settings naming a file of a Secret mounted in the component's pod (the datastore's certificate, the
    controllers' mirror CA), pointed at a local copy of that file: the Secret's rendered content, or for one the
    chart does not make (cert-manager's, existingSecret) what the chart would generate."""
    deployment = next(o for o in objects if o["kind"] == "Deployment"
                      and o["metadata"]["labels"].get("app.kubernetes.io/component") == component)
    pod = deployment["spec"]["template"]["spec"]
    secrets = {v["name"]: v["secret"] for v in pod.get("volumes") or () if "secret" in v}
    files = {}
    for key, value in data.items():
        for mount in pod["containers"][0].get("volumeMounts") or ():
            if mount["name"] in secrets and value.startswith(mount["mountPath"] + "/"):
                volume, path = secrets[mount["name"]], value[len(mount["mountPath"]) + 1:]
                items = {i["path"]: i["key"] for i in volume.get("items") or ()}
                assert not volume.get("items") or path in items, f"{key}: {path} is not mounted"
                made = [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == volume["secretName"]]
                secret = made[0] if made else find(render_chart({"toolCache": {"enabled": True}}, RELEASE, NAMESPACE),
                                                   "Secret", f"{RELEASE}-datastore-tls")
                local = into / path
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_bytes(base64.b64decode(secret["data"][items.get(path, path)]))
                files[key] = str(local)
    return files


def _deployment_envs(objects: list[dict[str, Any]], component: str) -> list[dict[str, str]]:
    """The literal BURRITO_PY_* env of each Deployment of `component` (controllers: one per shard)."""
    envs = []
    for deployment in objects:
        labels = deployment["metadata"].get("labels") or {}
        if deployment["kind"] == "Deployment" and labels.get("app.kubernetes.io/component") == component:
            container = deployment["spec"]["template"]["spec"]["containers"][0]
            envs.append({e["name"]: e["value"] for e in container.get("env") or ()
                         if e["name"].startswith("BURRITO_PY_") and "value" in e})
    assert envs, f"no {component} Deployment"
    return envs


def test_default_config_reaches_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = rendered("tenants")
    for key, value in _config(objects, "controllers").items():
        monkeypatch.setenv(key, value)
    settings = ControllerSettings()
    assert settings.namespaces == ["team-a", "team-b"]
    assert settings.datastore_url == f"http://{RELEASE}-datastore.{NAMESPACE}.svc.cluster.local:8080"
    assert settings.runner_image == "ghcr.io/burrito-py/burrito-py-runner:0.1.0"
    assert settings.runner_service_account == "burrito-py-runner"
    assert settings.drift_detection_period == ChartValues().controllers.config.drift_detection_period
    assert settings.health_port == 8082 and settings.metrics_port == 9464
    assert str(settings.datastore_token_path) == "/var/run/secrets/burrito-py/token"


def test_the_servers_request_bound_and_slow_client_timers_are_chart_values(monkeypatch: pytest.MonkeyPatch) -> None:
    config = {"maxRequestBytes": 262144, "headerTimeoutSeconds": 5, "readTimeoutSeconds": 30,
              "writeTimeoutSeconds": 45}
    for key, value in _config(render_chart({"server": {"config": config}}, RELEASE, NAMESPACE), "server").items():
        monkeypatch.setenv(key, value)
    settings = ServerSettings()
    assert (settings.max_request_bytes, settings.header_timeout_seconds, settings.read_timeout_seconds,
            settings.write_timeout_seconds) == (262144, 5.0, 30.0, 45.0)


def test_the_runners_placement_is_a_chart_value_the_controllers_read(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = {"nodeSelector": {"pool": "runners"},
              "tolerations": [{"key": "pool", "value": "runners", "effect": "NoSchedule"}],
              "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}}
    for key, value in _config(render_chart({"runner": runner}, RELEASE, NAMESPACE), "controllers").items():
        monkeypatch.setenv(key, value)
    settings = ControllerSettings()
    assert settings.runner_node_selector == runner["nodeSelector"]
    assert settings.runner_tolerations == runner["tolerations"]
    assert settings.runner_affinity == runner["affinity"]


def test_the_outbound_guard_allows_nothing_internal_by_default_and_takes_the_allow_lists(
        monkeypatch: pytest.MonkeyPatch) -> None:
    default = _config(rendered("default"), "controllers")
    assert default["BURRITO_PY_OUTBOUND_ALLOWED_NETWORKS"] == "[]"
    assert default["BURRITO_PY_OUTBOUND_ALLOWED_HOSTS"] == "[]"
    config = {"outboundAllowedNetworks": ["10.20.0.0/16", "fd00::/8"],
              "outboundAllowedHosts": ["gitea.tools.svc.cluster.local", "*.corp.example"]}
    objects = render_chart({"controllers": {"config": config}}, RELEASE, NAMESPACE)
    for key, value in _config(objects, "controllers").items():
        monkeypatch.setenv(key, value)
    assert ControllerSettings().outbound_policy() == OutboundPolicy.of(config["outboundAllowedNetworks"],
                                                                      config["outboundAllowedHosts"])
    with pytest.raises(ChartRenderError, match="outboundAllowedNetworks"):
        render_chart({"controllers": {"config": {"outboundAllowedNetworks": ["git.example.com"]}}}, RELEASE,
                     NAMESPACE)


def test_cluster_mode_watches_every_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = rendered("cluster-mode")
    assert _config(objects, "controllers")["BURRITO_PY_NAMESPACES"] == "[]"
    assert _config(objects, "server")["BURRITO_PY_SERVER_NAMESPACES"] == "[]"
    assert _config(rendered("default"), "controllers")["BURRITO_PY_NAMESPACES"] == f'["{NAMESPACE}"]'


def test_datastore_s3_encryption_and_admins(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = rendered("s3-encryption")
    for key, value in _config(objects, "datastore").items():
        monkeypatch.setenv(key, value)
    storage, settings = StorageSettings(), DatastoreSettings()
    assert (storage.backend, storage.s3_bucket, storage.s3_prefix) == ("s3", "burrito-py-artifacts", "prod/")
    assert storage.s3_path_style and storage.s3_region == "eu-west-1"
    assert storage.s3_endpoint_url == "https://minio.storage.svc:9000"
    assert (storage.encryption_secret_name, storage.encryption_secret_namespace) == ("burrito-py-keys", NAMESPACE)
    assert storage.encryption_active_key_id == "2026-01"
    assert storage.retention_enabled and storage.retention_grace_seconds == 7200
    assert settings.auth_admin_users == [
        f"system:serviceaccount:{NAMESPACE}:{RELEASE}-controllers",
        f"system:serviceaccount:{NAMESPACE}:{RELEASE}-server",
    ]
    deployment = find(objects, "Deployment", f"{RELEASE}-datastore")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    secrets = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e
               and "secretKeyRef" in e["valueFrom"]}
    assert secrets == {
        "AWS_ACCESS_KEY_ID": {"name": "burrito-py-s3", "key": "AWS_ACCESS_KEY_ID"},
        "AWS_SECRET_ACCESS_KEY": {"name": "burrito-py-s3", "key": "AWS_SECRET_ACCESS_KEY"},
    }
    assert not [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    account = find(objects, "ServiceAccount", f"{RELEASE}-datastore")
    assert account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/burrito-py-datastore"
    }


@pytest.mark.parametrize("component", ["controllers", "datastore", "server"])
def test_components_bind_the_pod_ip_and_probe_real_endpoints(component: str) -> None:
    from typer.testing import CliRunner

    from burrito_py.cli import app

    objects = rendered("default")
    pod = find(objects, "Deployment", f"{RELEASE}-{component}")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["burrito-py"]
    assert container["args"] == [component, "start", "--host", "$(POD_IP)"]
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in container["env"]
    help_text = CliRunner().invoke(app, [component, "start", "--help"]).output
    assert "--host" in help_text
    assert container["envFrom"] == [{"configMapRef": {"name": f"{RELEASE}-{component}"}}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"
    assert pod["serviceAccountName"] == f"{RELEASE}-{component}"


def test_services_ports_and_token_volumes() -> None:
    objects = rendered("default")
    assert find(objects, "Service", f"{RELEASE}-datastore")["spec"]["ports"][0]["port"] == 8080
    assert find(objects, "Service", f"{RELEASE}-server")["spec"]["ports"][0]["port"] == 8081
    assert find(objects, "Service", f"{RELEASE}-controllers-metrics")["spec"]["ports"][0]["port"] == 9464
    for component in ("controllers", "server"):
        pod = find(objects, "Deployment", f"{RELEASE}-{component}")["spec"]["template"]["spec"]
        token = next(v for v in pod["volumes"] if v["name"] == "burrito-py-token")
        assert token["projected"]["sources"][0]["serviceAccountToken"]["audience"] == "burrito-py"
        mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "burrito-py-token")
        assert mount["mountPath"] == "/var/run/secrets/burrito-py"


def test_a_config_change_rolls_only_that_components_pods() -> None:
    def checksums(values: dict[str, Any]) -> dict[str, str]:
        objects = render_chart(values, RELEASE, NAMESPACE)
        return {
            c: find(objects, "Deployment", f"{RELEASE}-{c}")["spec"]["template"]["metadata"]["annotations"][
                "checksum/config"]
            for c in ("controllers", "datastore", "server")
        }

    before = checksums({})
    after = checksums({"controllers": {"config": {"maxRetries": 7}}})
    assert before["controllers"] != after["controllers"]
    assert before["datastore"] == after["datastore"] and before["server"] == after["server"]
    assert len(before["controllers"]) == len(hashlib.sha256().hexdigest())


def test_two_controllers_replicas_with_leader_election_a_pdb_and_spread_by_default() -> None:
    """Issue 12: the controllers run 2 replicas (one leader, one standby) by default, rolled one at a time with a
    surge (the Lease lets only one act), kept by a PodDisruptionBudget, spread over nodes when possible."""
    objects = rendered("default")
    pdbs = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "PodDisruptionBudget"}
    assert set(pdbs) == {f"{RELEASE}-controllers"} and pdbs[f"{RELEASE}-controllers"]["minAvailable"] == 1
    controllers = find(objects, "Deployment", f"{RELEASE}-controllers")["spec"]
    assert controllers["replicas"] == 2
    assert controllers["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = controllers["template"]["spec"]
    [spread] = pod["topologySpreadConstraints"]
    assert (spread["topologyKey"], spread["whenUnsatisfiable"]) == ("kubernetes.io/hostname", "ScheduleAnyway")
    assert spread["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "controllers"
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    config = find(objects, "ConfigMap", f"{RELEASE}-controllers")["data"]
    assert config["BURRITO_PY_LEADER_ELECTION"] == "true"
    assert config["BURRITO_PY_LEADER_ELECTION_NAMESPACE"] == NAMESPACE
    assert config["BURRITO_PY_LEADER_ELECTION_NAME"] == f"{RELEASE}-controllers"
    assert (config["BURRITO_PY_LEASE_DURATION"], config["BURRITO_PY_RENEW_DEADLINE"],
            config["BURRITO_PY_RETRY_PERIOD"]) == ("PT15S", "PT10S", "PT2S")
    ha = rendered("ha")
    assert {o["metadata"]["name"] for o in ha if o["kind"] == "PodDisruptionBudget"} == {
        f"{RELEASE}-controllers", f"{RELEASE}-server"}


def test_one_controllers_replica_without_leader_election_is_recreated_and_more_are_refused() -> None:
    values = {"controllers": {"replicas": 1, "config": {"leaderElection": False}}}
    objects = render_chart(values, RELEASE, NAMESPACE)
    assert find(objects, "Deployment", f"{RELEASE}-controllers")["spec"]["strategy"] == {"type": "Recreate"}
    assert not [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    with pytest.raises(ChartRenderError, match=r"replicas above 1 needs controllers\.config\.leaderElection"):
        render_chart({"controllers": {"replicas": 2, "config": {"leaderElection": False}}}, RELEASE, NAMESPACE)


def test_crds_off_and_tenant_namespaces() -> None:
    assert not [o for o in rendered("crds-off") if o["kind"] == "CustomResourceDefinition"]
    namespaces = [o for o in rendered("tenants") if o["kind"] == "Namespace"]
    assert [n["metadata"]["name"] for n in namespaces] == ["team-a"]
    assert namespaces[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_local_default_tenant_renders_with_pull_policy_never() -> None:
    objects = rendered("local-default-tenant")
    for component in ("controllers", "datastore", "server"):
        pod = find(objects, "Deployment", f"{RELEASE}-{component}")["spec"]["template"]["spec"]
        assert pod["containers"][0]["imagePullPolicy"] == "Never"
    runner = find(objects, "ServiceAccount", "burrito-py-runner")
    assert runner["metadata"]["namespace"] == "default"


def test_network_policies_are_on_by_default_and_runner_pods_accept_no_connection() -> None:
    """Issue 24 finding 12: NetworkPolicies were off by default. On now, with runner pods closed to ingress and
    their egress open (a default that broke every cloud provider would be wrong)."""
    from burrito_py.chart.chart import render_chart

    default = rendered("default")
    assert {o["metadata"]["name"] for o in default if o["kind"] == "NetworkPolicy"} == {
        f"{RELEASE}-{c}" for c in ("datastore", "server", "controllers", "runner")}
    runner = find(default, "NetworkPolicy", f"{RELEASE}-runner")
    assert runner["metadata"]["namespace"] == NAMESPACE
    assert runner["spec"] == {"podSelector": {"matchLabels": {"burrito-py.io/component": "runner"}},
                              "policyTypes": ["Ingress"], "ingress": []}
    assert not [o for o in render_chart({"networkPolicy": {"enabled": False}}, RELEASE, NAMESPACE)
                if o["kind"] == "NetworkPolicy"]
    # Restricted egress: DNS, the datastore (and its mirrors), then what the values list.
    api = {"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}], "ports": [{"port": 443, "protocol": "TCP"}]}
    objects = render_chart({"tenants": [{"namespace": "team-a"}], "networkPolicy": {"runnerEgress": [api]},
                            "toolCache": {"enabled": True}}, RELEASE, NAMESPACE)
    spec = find(objects, "NetworkPolicy", f"{RELEASE}-runner")["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["ingress"] == []
    dns, datastore, listed = spec["egress"]
    assert dns == {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}
    assert datastore["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "burrito-py",
                                                                "app.kubernetes.io/instance": RELEASE,
                                                                "app.kubernetes.io/component": "datastore"}}}]
    assert datastore["ports"] == [{"port": 8080, "protocol": "TCP"}, {"port": 8443, "protocol": "TCP"}]
    assert listed == api


def test_network_policies() -> None:
    objects = rendered("network-policy")
    datastore = find(objects, "NetworkPolicy", f"{RELEASE}-datastore")["spec"]
    peers = datastore["ingress"][0]["from"]
    runner_namespaces = sorted(
        p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for p in peers if "namespaceSelector" in p
    )
    assert runner_namespaces == ["team-a", "team-b"]
    assert all(p["podSelector"]["matchLabels"] == {"burrito-py.io/component": "runner"}
               for p in peers if "namespaceSelector" in p)
    components = sorted(p["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
                        for p in peers if "namespaceSelector" not in p)
    assert components == ["controllers", "server"]
    server = find(objects, "NetworkPolicy", f"{RELEASE}-server")["spec"]["ingress"][0]
    assert server["from"] == VALUE_SETS["network-policy"]["networkPolicy"]["serverIngressFrom"]


def test_ingress() -> None:
    ingress = find(rendered("monitoring-ingress"), "Ingress", f"{RELEASE}-server")["spec"]
    assert ingress["ingressClassName"] == "nginx"
    path = ingress["rules"][0]["http"]["paths"][0]
    assert path["backend"]["service"] == {"name": f"{RELEASE}-server", "port": {"name": "http"}}
    assert ingress["tls"] == [{"secretName": "burrito-tls", "hosts": ["burrito.example.com"]}]
