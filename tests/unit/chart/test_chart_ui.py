"""The web UI's session key in the chart: one Secret every server replica reads, generated once and kept across
upgrades (or the operator's own), so neither a restart nor another replica logs users out."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from typing import Any

import pytest

from burrito_py.chart.chart import render_chart
from burrito_py.chart.chartgen import CHART_DIR
from tests.unit.chart.rendering import NAMESPACE, RELEASE, find, rendered


def _server_env(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = find(objects, "Deployment", f"{RELEASE}-server")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e for e in container.get("env") or ()}


def test_the_session_key_is_generated_once_and_read_by_every_replica() -> None:
    objects = rendered("default")
    secret = find(objects, "Secret", f"{RELEASE}-server-ui")
    key = base64.b64decode(secret["data"]["sessionKey"]).decode()
    assert len(key) == 48 and key.isalnum()
    assert _server_env(objects)["BURRITO_PY_SERVER_UI_SESSION_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": f"{RELEASE}-server-ui", "key": "sessionKey"}}
    config = find(objects, "ConfigMap", f"{RELEASE}-server")["data"]
    assert config["BURRITO_PY_SERVER_UI_ENABLED"] == "true"
    assert config["BURRITO_PY_SERVER_UI_TRUSTED_HEADERS"] == "false"


def test_an_existing_secret_is_used_and_a_disabled_ui_needs_none() -> None:
    mine = render_chart({"server": {"uiSession": {"existingSecret": "my-ui-key"}}}, RELEASE, NAMESPACE)
    assert not [o for o in mine if o["kind"] == "Secret" and o["metadata"]["name"] == f"{RELEASE}-server-ui"]
    assert _server_env(mine)["BURRITO_PY_SERVER_UI_SESSION_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "my-ui-key"
    off = render_chart({"server": {"config": {"uiEnabled": False}}}, RELEASE, NAMESPACE)
    assert not [o for o in off if o["kind"] == "Secret" and o["metadata"]["name"] == f"{RELEASE}-server-ui"]
    assert "BURRITO_PY_SERVER_UI_SESSION_KEY" not in _server_env(off)


def test_an_upgrade_keeps_the_key_it_finds(tmp_path: Path) -> None:
    """On a cluster `lookup` finds the Secret of the last install and its key is reused; here the lookup is replaced
    by its answer, since rendering has no cluster."""
    chart = tmp_path / "burrito-py"
    shutil.copytree(CHART_DIR, chart)
    template = chart / "templates" / "server-ui-secret.yaml"
    call = 'lookup "v1" "Secret" .Release.Namespace $name'
    text = template.read_text()
    assert text.count(call) == 1

    def key_with(found: str) -> str:
        template.write_text(text.replace(call, found))
        objects = render_chart({}, RELEASE, NAMESPACE, chart_dir=chart)
        return str(find(objects, "Secret", f"{RELEASE}-server-ui")["data"]["sessionKey"])

    assert key_with('(dict "data" (dict "sessionKey" "a2VlcA=="))') == "a2VlcA=="
    assert key_with("(dict)") != "a2VlcA=="  # nothing found: a new key


def test_cookies_are_secure_by_default_in_the_chart() -> None:
    """Attack (finding 13): behind a TLS-terminating Ingress the server sees http, so without the setting its session
    cookie went out without Secure; the chart had no value to force it."""
    config = find(rendered("default"), "ConfigMap", f"{RELEASE}-server")["data"]
    assert config["BURRITO_PY_SERVER_UI_SECURE_COOKIES"] == "true"
    off = render_chart({"server": {"config": {"uiSecureCookies": False}}}, RELEASE, NAMESPACE)
    assert find(off, "ConfigMap", f"{RELEASE}-server")["data"]["BURRITO_PY_SERVER_UI_SECURE_COOKIES"] == "false"


def test_stream_bounds_and_forwarded_addresses_reach_the_server() -> None:
    values = {"server": {"config": {"uiMaxStreamsPerUser": 3, "forwardedAllowIps": ["10.0.0.0/8"]}}}
    config = find(render_chart(values, RELEASE, NAMESPACE), "ConfigMap", f"{RELEASE}-server")["data"]
    assert config["BURRITO_PY_SERVER_UI_MAX_STREAMS_PER_USER"] == "3"
    assert config["BURRITO_PY_SERVER_FORWARDED_ALLOW_IPS"] == '["10.0.0.0/8"]'
    assert config["BURRITO_PY_SERVER_UI_MAX_STREAMS"] == "512"


def _service_ports(objects: list[dict[str, Any]]) -> list[str]:
    return [p["name"] for p in find(objects, "Service", f"{RELEASE}-server")["spec"]["ports"]]


def test_trusted_headers_get_their_own_port_that_only_the_proxy_reaches() -> None:
    """Attack (finding 13): trusted-header mode was served on the port webhooks make public. Now it is a second
    port, in the Service and the container, and the NetworkPolicy lets only trustedProxyFrom reach it."""
    assert _service_ports(rendered("default")) == ["http"]
    proxy = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "oauth2-proxy"}}}
    values = {"server": {"config": {"uiTrustedHeaders": True}},
              "networkPolicy": {"enabled": True, "trustedProxyFrom": [proxy]}}
    objects = render_chart(values, RELEASE, NAMESPACE)
    assert _service_ports(objects) == ["http", "proxy"]
    container = find(objects, "Deployment", f"{RELEASE}-server")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "proxy", "containerPort": 8083, "protocol": "TCP"} in container["ports"]
    rules = find(objects, "NetworkPolicy", f"{RELEASE}-server")["spec"]["ingress"]
    proxy_rules = [r for r in rules if r["ports"][0]["port"] == "proxy"]
    assert proxy_rules == [{"ports": [{"port": "proxy", "protocol": "TCP"}], "from": [proxy]}]
    assert all(r["ports"][0]["port"] != "proxy" or r.get("from") for r in rules)
    # Without a NetworkPolicy naming the proxy, any pod could reach the port: the chart refuses.
    for network_policy in ({"enabled": True}, {"enabled": False, "trustedProxyFrom": [proxy]}):
        with pytest.raises(Exception, match=r"uiTrustedHeaders needs networkPolicy\.enabled"):
            render_chart({"server": {"config": {"uiTrustedHeaders": True}}, "networkPolicy": network_policy},
                         RELEASE, NAMESPACE)
    config = find(objects, "ConfigMap", f"{RELEASE}-server")["data"]
    assert config["BURRITO_PY_SERVER_UI_TRUSTED_HEADERS_PORT"] == "8083"
