"""Issue 16: the datastore's HTTPS listener serving the provider and tool mirrors. With the caches off nothing
changes; on, the datastore gets its certificate (a Secret the chart generates and keeps, cert-manager's, or
yours), port 8443 and the settings, the controllers the mirror URLs and the CA alone, runner pods the way in."""

from __future__ import annotations

import base64
import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from burrito_py.chart.chart import CHART_DIR, ChartRenderError, render_chart
from burrito_py.chart.rbac import grants
from burrito_py.chart.values import ChartValues
from tests.unit.chart.rendering import NAMESPACE, RELEASE, VALUE_SETS, find, rendered

SECRET = f"{RELEASE}-datastore-tls"
HTTPS = f"https://{RELEASE}-datastore.{NAMESPACE}.svc.cluster.local:8443"
DNS_NAMES = [f"{RELEASE}-datastore", f"{RELEASE}-datastore.{NAMESPACE}", f"{RELEASE}-datastore.{NAMESPACE}.svc",
             f"{RELEASE}-datastore.{NAMESPACE}.svc.cluster.local"]
CA_FILE = "/etc/burrito-py/mirror-ca/ca.crt"
CACHE_KINDS = {"Certificate", "Issuer", "PrometheusRule"}


def _render(values: dict[str, Any]) -> list[dict[str, Any]]:
    return render_chart(values, RELEASE, NAMESPACE)


def _config(objects: list[dict[str, Any]], component: str) -> dict[str, str]:
    data: dict[str, str] = find(objects, "ConfigMap", f"{RELEASE}-{component}")["data"]
    return data


def _pod(objects: list[dict[str, Any]], component: str) -> dict[str, Any]:
    pod: dict[str, Any] = find(objects, "Deployment", f"{RELEASE}-{component}")["spec"]["template"]["spec"]
    return pod


def _volume(pod: dict[str, Any], name: str) -> dict[str, Any]:
    [volume] = [v for v in pod["volumes"] if v["name"] == name]
    found: dict[str, Any] = volume
    return found


def _mount(pod: dict[str, Any], name: str) -> dict[str, Any]:
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == name]
    found: dict[str, Any] = mount
    return found


def _cache_keys(data: dict[str, str]) -> set[str]:
    return {k for k in data if any(w in k for w in ("TLS", "MIRROR", "PROVIDER_CACHE", "TOOL_CACHE"))}


@pytest.mark.parametrize("name", ["default", "tenants", "network-policy", "monitoring-ingress"])
def test_with_the_caches_off_nothing_is_added(name: str) -> None:
    objects = rendered(name)
    assert not [o for o in objects if o["kind"] in CACHE_KINDS or _tls_secret(o)]
    for component in ("controllers", "datastore"):
        assert _cache_keys(_config(objects, component)) == set()
        pod = _pod(objects, component)
        assert all(v.get("secret") is None for v in pod["volumes"])
        assert [p["name"] for p in pod["containers"][0]["ports"]] != ["https"]
    assert [p["name"] for p in _pod(objects, "datastore")["containers"][0]["ports"]] == ["http"]
    assert [p["name"] for p in find(objects, "Service", f"{RELEASE}-datastore")["spec"]["ports"]] == ["http"]
    for policy in (o for o in objects if o["kind"] == "NetworkPolicy"):
        assert "https" not in json.dumps(policy)


def _tls_secret(obj: dict[str, Any]) -> bool:
    """A Secret of the caches (the UI's session key Secret is the server's, always there: test_chart_ui.py)."""
    return obj["kind"] == "Secret" and obj["metadata"]["name"] != f"{RELEASE}-server-ui"


def _load_secret(objects: list[dict[str, Any]]) -> tuple[x509.Certificate, x509.Certificate, Any]:
    secret = find(objects, "Secret", SECRET)
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    pem = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    ca = x509.load_pem_x509_certificate(pem["ca.crt"])
    cert = x509.load_pem_x509_certificate(pem["tls.crt"])
    key = serialization.load_pem_private_key(pem["tls.key"], password=None)
    return ca, cert, key


def test_provider_cache_generates_a_ca_and_a_server_certificate_for_the_datastore_service() -> None:
    ca, cert, key = _load_secret(_render({"providerCache": {"enabled": True}}))
    cert.verify_directly_issued_by(ca)  # raises unless the CA signed it
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    assert (key.public_key().public_bytes(serialization.Encoding.PEM, public)
            == cert.public_key().public_bytes(serialization.Encoding.PEM, public))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == DNS_NAMES
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in usages
    assert cert.not_valid_after_utc - cert.not_valid_before_utc > timedelta(days=3000)


def test_provider_cache_turns_on_the_datastore_https_listener() -> None:
    objects = _render({"providerCache": {"enabled": True}})
    config = _config(objects, "datastore")
    assert {k: config[k] for k in _cache_keys(config)} == {
        "BURRITO_PY_DATASTORE_TLS_PORT": "8443",
        "BURRITO_PY_DATASTORE_TLS_CERT_FILE": "/etc/burrito-py/tls/tls.crt",
        "BURRITO_PY_DATASTORE_TLS_KEY_FILE": "/etc/burrito-py/tls/tls.key",
        "BURRITO_PY_DATASTORE_PROVIDER_CACHE_ENABLED": "true",
        "BURRITO_PY_DATASTORE_PROVIDER_CACHE_REGISTRIES": '["registry.terraform.io","registry.opentofu.org"]',
        "BURRITO_PY_DATASTORE_PROVIDER_CACHE_INDEX_TTL_SECONDS": "600",
        "BURRITO_PY_DATASTORE_PROVIDER_CACHE_MAX_BYTES": "21474836480",  # bounded by default (§10.5)
        "BURRITO_PY_DATASTORE_PROVIDER_CACHE_REGISTRY_URLS": "{}",
        "BURRITO_PY_DATASTORE_TOOL_CACHE_ENABLED": "false",
    }
    pod = _pod(objects, "datastore")
    container = pod["containers"][0]
    assert {"name": "https", "containerPort": 8443, "protocol": "TCP"} in container["ports"]
    assert _volume(pod, "tls")["secret"] == {"secretName": SECRET, "defaultMode": 0o440}
    mount = _mount(pod, "tls")
    assert mount["readOnly"] is True and "subPath" not in mount  # a renewed certificate reaches the files
    assert config["BURRITO_PY_DATASTORE_TLS_CERT_FILE"] == f"{mount['mountPath']}/tls.crt"
    assert config["BURRITO_PY_DATASTORE_TLS_KEY_FILE"] == f"{mount['mountPath']}/tls.key"
    service = find(objects, "Service", f"{RELEASE}-datastore")["spec"]["ports"]
    assert {"name": "https", "port": 8443, "targetPort": "https", "protocol": "TCP"} in service
    assert service[0]["name"] == "http"  # the plan-download Role names port 8080/http: it stays first


def test_provider_cache_gives_the_controllers_the_mirror_url_and_only_the_ca() -> None:
    objects = _render({"providerCache": {"enabled": True}})
    config = _config(objects, "controllers")
    assert {k: config[k] for k in _cache_keys(config)} == {
        "BURRITO_PY_PROVIDER_MIRROR_URL": f"{HTTPS}/providers/v1/",
        "BURRITO_PY_PROVIDER_MIRROR_FAIL_CLOSED": "false",
        "BURRITO_PY_PROVIDER_MIRROR_REGISTRIES": '["registry.terraform.io","registry.opentofu.org"]',
        "BURRITO_PY_MIRROR_CA_FILE": CA_FILE,
    }
    pod = _pod(objects, "controllers")
    assert _volume(pod, "mirror-ca")["secret"] == {"secretName": SECRET, "items": [{"key": "ca.crt",
                                                                                      "path": "ca.crt"}]}
    mount = _mount(pod, "mirror-ca")
    assert mount["readOnly"] is True and f"{mount['mountPath']}/ca.crt" == CA_FILE
    assert [p["name"] for p in pod["containers"][0]["ports"]] == ["metrics", "health"]
    # The server has nothing to do with the mirrors.
    assert _cache_keys(_config(objects, "server")) == set()
    assert all(v.get("secret") is None for v in _pod(objects, "server")["volumes"])


def test_the_caches_value_set() -> None:
    """Both caches, a failing-closed provider mirror with its own registries, TTL and bound."""
    objects = rendered("caches")
    datastore, controllers = _config(objects, "datastore"), _config(objects, "controllers")
    assert json.loads(datastore["BURRITO_PY_DATASTORE_PROVIDER_CACHE_REGISTRIES"]) == [
        "registry.terraform.io", "registry.opentofu.org", "terraform.example.com"]
    assert datastore["BURRITO_PY_DATASTORE_PROVIDER_CACHE_INDEX_TTL_SECONDS"] == "5400"
    assert datastore["BURRITO_PY_DATASTORE_PROVIDER_CACHE_MAX_BYTES"] == "21474836480"
    assert datastore["BURRITO_PY_DATASTORE_TOOL_CACHE_ENABLED"] == "true"
    assert controllers["BURRITO_PY_PROVIDER_MIRROR_FAIL_CLOSED"] == "true"
    assert controllers["BURRITO_PY_TOOL_MIRROR_URL"] == f"{HTTPS}/tools/v1/"
    assert controllers["BURRITO_PY_PROVIDER_MIRROR_URL"] == f"{HTTPS}/providers/v1/"
    _load_secret(objects)


def test_tool_cache_alone_serves_no_provider_mirror() -> None:
    objects = _render({"toolCache": {"enabled": True}})
    datastore, controllers = _config(objects, "datastore"), _config(objects, "controllers")
    assert datastore["BURRITO_PY_DATASTORE_PROVIDER_CACHE_ENABLED"] == "false"
    assert datastore["BURRITO_PY_DATASTORE_TOOL_CACHE_ENABLED"] == "true"
    assert datastore["BURRITO_PY_DATASTORE_TOOL_CACHE_MAX_BYTES"] == "5368709120"  # bounded by default (§10.5)
    # Only the index age applies to the tool cache too (its release lists).
    assert {k for k in datastore if k.startswith("BURRITO_PY_DATASTORE_PROVIDER_CACHE_")} == {
        "BURRITO_PY_DATASTORE_PROVIDER_CACHE_ENABLED", "BURRITO_PY_DATASTORE_PROVIDER_CACHE_INDEX_TTL_SECONDS"}
    assert datastore["BURRITO_PY_DATASTORE_PROVIDER_CACHE_INDEX_TTL_SECONDS"] == "600"
    assert "BURRITO_PY_PROVIDER_MIRROR_URL" not in controllers
    assert "BURRITO_PY_PROVIDER_MIRROR_FAIL_CLOSED" not in controllers
    assert controllers["BURRITO_PY_TOOL_MIRROR_URL"] == f"{HTTPS}/tools/v1/"
    assert controllers["BURRITO_PY_MIRROR_CA_FILE"] == CA_FILE
    _load_secret(objects)


@pytest.mark.parametrize(
    ("ttl", "seconds"),
    [("PT10M", "600"), ("PT1H30M", "5400"), ("P1DT2H", "93600"), ("P1W", "604800"), ("PT0.5S", "0.5"),
     ("PT1M30.25S", "90.25"), ("P0D", "0"), ("PT0S", "0")],
)
def test_index_ttl_is_an_iso_8601_duration_passed_in_seconds(ttl: str, seconds: str) -> None:
    values = {"providerCache": {"enabled": True, "indexTtl": ttl}}
    config = _config(_render(values), "datastore")
    assert config["BURRITO_PY_DATASTORE_PROVIDER_CACHE_INDEX_TTL_SECONDS"] == seconds
    # The same duration as the values model reads it.
    assert ChartValues.model_validate(values).provider_cache.index_ttl.total_seconds() == float(seconds)


@pytest.mark.parametrize("ttl", ["10m", "600", "P", "PT", "P1M", "P1Y", "-PT10M", "PT10M5H"])
def test_an_index_ttl_that_is_not_an_iso_8601_duration_fails_naming_the_value(ttl: str) -> None:
    with pytest.raises(ChartRenderError, match=r"providerCache\.indexTtl must be an ISO 8601 duration"):
        _render({"providerCache": {"enabled": True, "indexTtl": ttl}})


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"providerCache": {"enabeld": True}}, "'enabeld'"),
        ({"providerCache": {"registries": ["https://registry.terraform.io"]}}, "/providerCache/registries/0"),
        ({"providerCache": {"maxSize": -1}}, "/providerCache/maxSize"),
        ({"datastore": {"tls": {"certManager": {"issuerRef": {"kind": "Vault"}}}}},
         "/datastore/tls/certManager/issuerRef/kind"),
        ({"metrics": {"prometheusRule": {"enable": True}}}, "'enable'"),
    ],
)
def test_bad_cache_values_fail_naming_the_key(values: dict[str, Any], named: str) -> None:
    with pytest.raises(ChartRenderError) as failure:
        _render(values)
    assert named in str(failure.value)


def test_cert_manager_without_an_issuer_bootstraps_its_own_ca() -> None:
    objects = rendered("caches-cert-manager")
    assert not [o for o in objects if _tls_secret(o)]  # cert-manager writes it
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects if o["kind"] in CACHE_KINDS}
    assert kinds == {("Issuer", f"{RELEASE}-selfsigned"), ("Certificate", f"{RELEASE}-datastore-ca"),
                     ("Issuer", f"{RELEASE}-datastore-ca"), ("Certificate", f"{RELEASE}-datastore")}
    for kind, name in kinds:
        obj = find(objects, kind, name)
        assert obj["apiVersion"] == "cert-manager.io/v1" and obj["metadata"]["namespace"] == NAMESPACE
    assert find(objects, "Issuer", f"{RELEASE}-selfsigned")["spec"] == {"selfSigned": {}}
    ca = find(objects, "Certificate", f"{RELEASE}-datastore-ca")["spec"]
    assert ca["isCA"] is True
    assert ca["issuerRef"] == {"name": f"{RELEASE}-selfsigned", "kind": "Issuer", "group": "cert-manager.io"}
    ca_issuer = find(objects, "Issuer", f"{RELEASE}-datastore-ca")["spec"]
    assert ca_issuer == {"ca": {"secretName": ca["secretName"]}}
    server = find(objects, "Certificate", f"{RELEASE}-datastore")["spec"]
    assert server["secretName"] == SECRET
    assert server["dnsNames"] == DNS_NAMES
    assert "server auth" in server["usages"]
    assert server["issuerRef"] == {"name": f"{RELEASE}-datastore-ca", "kind": "Issuer", "group": "cert-manager.io"}
    # The pods mount what cert-manager writes.
    assert _volume(_pod(objects, "datastore"), "tls")["secret"]["secretName"] == SECRET
    assert _volume(_pod(objects, "controllers"), "mirror-ca")["secret"]["secretName"] == SECRET


def test_cert_manager_with_an_issuer_uses_it_alone() -> None:
    issuer = {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    objects = _render({"providerCache": {"enabled": True},
                       "datastore": {"tls": {"certManager": {"enabled": True, "issuerRef": issuer}}}})
    assert not [o for o in objects if o["kind"] == "Issuer" or _tls_secret(o)]
    [certificate] = [o for o in objects if o["kind"] == "Certificate"]
    assert certificate["metadata"]["name"] == f"{RELEASE}-datastore"
    assert certificate["spec"]["issuerRef"] == issuer
    assert certificate["spec"]["secretName"] == SECRET and certificate["spec"]["dnsNames"] == DNS_NAMES


def test_an_existing_secret_is_mounted_and_nothing_is_made() -> None:
    objects = _render({"providerCache": {"enabled": True}, "toolCache": {"enabled": True},
                       "datastore": {"tls": {"existingSecret": "my-datastore-tls", "certManager": {"enabled": True}}}})
    assert not [o for o in objects if o["kind"] in CACHE_KINDS or _tls_secret(o)]
    assert _volume(_pod(objects, "datastore"), "tls")["secret"]["secretName"] == "my-datastore-tls"
    ca = _volume(_pod(objects, "controllers"), "mirror-ca")["secret"]
    assert ca == {"secretName": "my-datastore-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}]}


def test_an_existing_generated_secret_is_kept_across_upgrades(tmp_path: Path) -> None:
    """On a cluster `lookup` finds the Secret an earlier install generated, and its data is reused (the CA the
    runners trust stays); here the lookup is replaced by its answer, since rendering has no cluster."""
    chart = tmp_path / "burrito-py"
    shutil.copytree(CHART_DIR, chart)
    template = chart / "templates" / "datastore-tls.yaml"
    call = 'lookup "v1" "Secret" .Release.Namespace $secretName'
    text = template.read_text()
    assert text.count(call) == 1

    def render_with(found: str) -> dict[str, str]:
        template.write_text(text.replace(call, found))
        objects = render_chart({"providerCache": {"enabled": True}}, RELEASE, NAMESPACE, chart_dir=chart)
        data: dict[str, str] = find(objects, "Secret", SECRET)["data"]
        return data

    earlier = {"tls.crt": "Y2VydA==", "tls.key": "a2V5", "ca.crt": "Y2E=", "other": "eA=="}
    found = 'dict "data" (dict "tls.crt" "Y2VydA==" "tls.key" "a2V5" "ca.crt" "Y2E=" "other" "eA==")'
    assert render_with(f"({found})") == {k: earlier[k] for k in ("tls.crt", "tls.key", "ca.crt")}
    # Nothing found (or a Secret without the three keys): a new CA and certificate.
    for nothing in ('dict', 'dict "data" (dict "tls.crt" "Y2VydA==")'):
        data = render_with(f"({nothing})")
        assert data["ca.crt"] != earlier["ca.crt"]
        assert x509.load_pem_x509_certificate(base64.b64decode(data["ca.crt"]))


def test_runner_pods_reach_the_https_listener_and_the_datastore_keeps_its_egress() -> None:
    objects = rendered("caches")
    policy = find(objects, "NetworkPolicy", f"{RELEASE}-datastore")["spec"]
    # Ingress only: egress is not restricted, so the mirrors reach the registries and release sites on 443.
    assert policy["policyTypes"] == ["Ingress"]
    http, https = policy["ingress"]
    assert http["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert https["ports"] == [{"port": "https", "protocol": "TCP"}]
    runners = [p for p in http["from"] if "namespaceSelector" in p]
    assert https["from"] == runners  # runner pods of the tenants, and nobody else
    assert sorted(p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for p in runners) == [
        "team-a", "team-b"]
    # Cluster mode too: runners run only in the tenant namespaces (the controllers create pods nowhere else).
    cluster = _render({"clusterMode": True, "tenants": [{"namespace": "team-a"}], "toolCache": {"enabled": True}})
    https = find(cluster, "NetworkPolicy", f"{RELEASE}-datastore")["spec"]["ingress"][1]
    assert https["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}},
                              "podSelector": {"matchLabels": {"burrito-py.io/component": "runner"}}}]


def test_prometheus_rule() -> None:
    assert not [o for o in rendered("monitoring-ingress") if o["kind"] == "PrometheusRule"]
    rule = find(rendered("caches"), "PrometheusRule", RELEASE)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert alerts["BurritoPyProviderMirrorFallbacks"]["expr"] == (
        "increase(burrito_py_provider_mirror_fallbacks_total[15m]) > 0")
    # Prometheus' own templating survives Helm's.
    assert "{{ $value | humanize }}" in alerts["BurritoPyProviderMirrorFallbacks"]["annotations"]["description"]
    assert alerts["BurritoPyRunnerPodsNotStarted"]["expr"] == (
        "sum by (namespace) (increase(burrito_py_runner_pods_not_started_total[30m])) > 0")
    assert "{{ $labels.namespace }}" in alerts["BurritoPyRunnerPodsNotStarted"]["annotations"]["description"]
    assert alerts["BurritoPyRunnersTimedOut"]["expr"] == (
        "sum by (namespace, action) (increase(burrito_py_runner_timeouts_total[1h])) > 0")


def test_the_caches_need_no_new_grants() -> None:
    """The certificate is mounted, never read through the API."""
    on = VALUE_SETS["caches"]
    off = {k: v for k, v in on.items() if k not in ("providerCache", "toolCache")}
    assert grants(rendered("caches")) == grants(_render(off))
    assert grants(rendered("caches-cert-manager")) == grants(rendered("default"))


def test_enabling_a_cache_rolls_the_datastore_and_controllers_but_not_the_server() -> None:
    def checksums(objects: list[dict[str, Any]]) -> dict[str, str]:
        return {c: find(objects, "Deployment", f"{RELEASE}-{c}")["spec"]["template"]["metadata"]["annotations"][
            "checksum/config"] for c in ("controllers", "datastore", "server")}

    before, after = checksums(rendered("default")), checksums(_render({"providerCache": {"enabled": True}}))
    assert before["controllers"] != after["controllers"] and before["datastore"] != after["datastore"]
    assert before["server"] == after["server"]


def test_the_controllers_read_the_ca_the_datastore_certificate_is_signed_by(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What the controllers hand to runner pods (ControllerSettings.mirror_ca_pem) is the generated CA."""
    from burrito_py.controllers.settings import ControllerSettings

    objects = rendered("caches")
    secret = find(objects, "Secret", SECRET)["data"]
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(base64.b64decode(secret["ca.crt"]))
    for key, value in _config(objects, "controllers").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("BURRITO_PY_MIRROR_CA_FILE", str(ca_file))
    settings = ControllerSettings()
    assert settings.provider_mirror_url == f"{HTTPS}/providers/v1/" and settings.provider_mirror_fail_closed
    assert settings.tool_mirror_url == f"{HTTPS}/tools/v1/"
    ca = x509.load_pem_x509_certificate(settings.mirror_ca_pem().encode())
    x509.load_pem_x509_certificate(base64.b64decode(secret["tls.crt"])).verify_directly_issued_by(ca)


# -- the caches' upstreams as an operator sets them (issue 27 item 6) ----------------------------------------
UPSTREAM_CA_FILE = "/etc/burrito-py/upstream-ca/ca.crt"


def _pem(tmp_path: Path) -> str:
    from tests.support.fakes.tls import make_tls

    return make_tls(tmp_path / "tls").ca.read_text()


def test_registry_addresses_release_sites_and_an_upstream_ca_reach_the_datastore(tmp_path: Path) -> None:
    """A private registry served elsewhere, a release mirror for both tools, and the in-house CA they use: the
    datastore gets them as its settings, the CA as a ConfigMap mounted read-only, and rolls when they change."""
    pem = _pem(tmp_path)
    values = {
        "providerCache": {"enabled": True, "registries": ["registry.terraform.io", "tf.corp.example"],
                          "registryUrls": {"tf.corp.example": "https://artifacts.corp.example/tf-registry"}},
        "toolCache": {"enabled": True, "terraformUrl": "https://artifacts.corp.example/hashicorp",
                      "opentofuUrl": "https://artifacts.corp.example/opentofu/releases/download",
                      "opentofuIndexUrl": "https://artifacts.corp.example/opentofu/api.json"},
        "cacheUpstream": {"caBundle": pem},
    }
    objects = _render(values)
    config = _config(objects, "datastore")
    assert json.loads(config["BURRITO_PY_DATASTORE_PROVIDER_CACHE_REGISTRY_URLS"]) == {
        "tf.corp.example": "https://artifacts.corp.example/tf-registry"}
    assert config["BURRITO_PY_DATASTORE_TOOL_CACHE_TERRAFORM_URL"] == "https://artifacts.corp.example/hashicorp"
    assert config["BURRITO_PY_DATASTORE_TOOL_CACHE_OPENTOFU_URL"] == (
        "https://artifacts.corp.example/opentofu/releases/download")
    assert config["BURRITO_PY_DATASTORE_TOOL_CACHE_OPENTOFU_INDEX_URL"] == (
        "https://artifacts.corp.example/opentofu/api.json")
    assert config["BURRITO_PY_DATASTORE_UPSTREAM_CA_FILE"] == UPSTREAM_CA_FILE
    assert find(objects, "ConfigMap", f"{RELEASE}-datastore-upstream-ca")["data"] == {"ca.crt": pem}
    pod = _pod(objects, "datastore")
    assert _volume(pod, "upstream-ca") == {"name": "upstream-ca",
                                           "configMap": {"name": f"{RELEASE}-datastore-upstream-ca"}}
    assert _mount(pod, "upstream-ca") == {"name": "upstream-ca", "mountPath": "/etc/burrito-py/upstream-ca",
                                          "readOnly": True}
    # The datastore's own settings model reads what the chart wrote.
    from burrito_py.datastore.app import DatastoreSettings

    with pytest.MonkeyPatch.context() as env:
        for key, value in config.items():
            if key.startswith("BURRITO_PY_DATASTORE_") and "CACHE" in key:
                env.setenv(key, value)
        settings = DatastoreSettings()
    assert settings.provider_cache_registry_urls == {"tf.corp.example": "https://artifacts.corp.example/tf-registry"}
    assert settings.tool_cache_opentofu_index_url == "https://artifacts.corp.example/opentofu/api.json"
    checksum = find(objects, "Deployment", f"{RELEASE}-datastore")["spec"]["template"]["metadata"]["annotations"]
    other = _render({**values, "cacheUpstream": {"caBundle": _pem(tmp_path / "other")}})
    assert find(other, "Deployment", f"{RELEASE}-datastore")["spec"]["template"]["metadata"]["annotations"][
        "checksum/config"] != checksum["checksum/config"]


def test_defaults_read_the_public_sites_and_add_no_ca() -> None:
    objects = _render({"providerCache": {"enabled": True}, "toolCache": {"enabled": True}})
    config = _config(objects, "datastore")
    assert json.loads(config["BURRITO_PY_DATASTORE_PROVIDER_CACHE_REGISTRY_URLS"]) == {}
    assert config["BURRITO_PY_DATASTORE_TOOL_CACHE_TERRAFORM_URL"] == "https://releases.hashicorp.com"
    assert "BURRITO_PY_DATASTORE_UPSTREAM_CA_FILE" not in config
    assert not [o for o in objects if o["metadata"]["name"].endswith("upstream-ca")]
    assert "upstream-ca" not in json.dumps(_pod(objects, "datastore"))


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"providerCache": {"registryUrls": {"tf.corp.example": "http://plain.example"}}},
         "/providerCache/registryUrls/tf.corp.example"),
        ({"providerCache": {"registryUrls": {"not a host": "https://x.example"}}}, "/providerCache/registryUrls"),
        ({"toolCache": {"terraformUrl": "ftp://x"}}, "/toolCache/terraformUrl"),
        ({"cacheUpstream": {"caBundle": "not a certificate"}}, "/cacheUpstream/caBundle"),
    ],
)
def test_bad_upstream_values_fail_naming_the_key(values: dict[str, Any], named: str) -> None:
    with pytest.raises(ChartRenderError) as failure:
        _render(values)
    assert named in str(failure.value)
