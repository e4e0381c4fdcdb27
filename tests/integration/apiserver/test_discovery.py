"""KUBE-API-FIDELITY.md § Discovery."""

from __future__ import annotations

import httpx

from tests.integration.apiserver.conftest import KubectlRun


def test_version_api_apis_and_group_versions_are_served(http: httpx.Client, widgets: str) -> None:
    assert http.get("/version").json()["gitVersion"].startswith("v1.")
    api = http.get("/api").json()
    assert api["kind"] == "APIVersions" and api["versions"] == ["v1"]
    groups = {g["name"]: g for g in http.get("/apis").json()["groups"]}
    assert groups["example.com"]["preferredVersion"] == {"groupVersion": "example.com/v1", "version": "v1"}
    assert {"coordination.k8s.io", "apiextensions.k8s.io", "authentication.k8s.io"} <= set(groups)
    group = http.get("/apis/coordination.k8s.io").json()
    assert group["kind"] == "APIGroup" and group["versions"][0]["groupVersion"] == "coordination.k8s.io/v1"
    listing = http.get("/apis/example.com/v1").json()
    assert listing["kind"] == "APIResourceList" and listing["groupVersion"] == "example.com/v1"
    entries = {r["name"]: r for r in listing["resources"]}
    assert entries["widgets"] == {
        "name": "widgets", "singularName": "widget", "namespaced": True, "kind": "Widget",
        "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        "shortNames": ["wg"], "categories": ["all"],
    }
    assert entries["widgets/status"]["verbs"] == ["get", "patch", "update"]


def test_health_endpoints_answer_ok(http: httpx.Client) -> None:
    for probe in ("/healthz", "/readyz", "/livez", "/readyz?verbose"):
        response = http.get(probe)
        assert response.status_code == 200 and response.text == "ok"


def test_builtin_resources_are_discoverable(http: httpx.Client) -> None:
    core = {r["name"]: r for r in http.get("/api/v1").json()["resources"]}
    for name in ("namespaces", "pods", "pods/log", "pods/status", "secrets", "configmaps", "events",
                 "serviceaccounts", "serviceaccounts/token"):
        assert name in core, name
    assert core["namespaces"]["namespaced"] is False and core["pods"]["namespaced"] is True
    assert core["serviceaccounts/token"]["kind"] == "TokenRequest"
    for group_version, plural in (("coordination.k8s.io/v1", "leases"),
                                  ("apiextensions.k8s.io/v1", "customresourcedefinitions"),
                                  ("authentication.k8s.io/v1", "tokenreviews"), ("events.k8s.io/v1", "events")):
        names = {r["name"] for r in http.get(f"/apis/{group_version}").json()["resources"]}
        assert plural in names, group_version


def test_kubectl_works_with_plain_json_discovery(kubectl: KubectlRun, http: httpx.Client) -> None:
    # kubectl first asks for aggregated discovery; plain JSON must make it fall back, not fail.
    aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    assert http.get("/apis", headers={"Accept": aggregated}).json()["kind"] == "APIGroupList"
    resources = kubectl("api-resources", "--no-headers").stdout
    assert "configmaps" in resources and "leases" in resources and "customresourcedefinitions" in resources
    assert "kube-system" in kubectl("get", "namespaces", "-o", "name").stdout
