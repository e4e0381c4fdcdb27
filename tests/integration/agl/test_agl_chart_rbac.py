"""Issue 25 item 5: an ApplicationDefinition added after the chart was installed, under the chart's real RBAC.

The AGL's point is that platform teams add kinds without redeploying. The chart granted the controllers exactly the
kinds listed in `controllers.agl.kinds`, so a kind added later was served (its CRD made) while its instances could
not be listed: the definition said `Ready=True … is served`, no instance was ever compiled, nothing said why, and
the watch tried again every second forever. Now the chart lets the controllers read every kind of the groups in
`controllers.agl.groups` (`apps.burrito-py.io` by default), so such a kind just works; a kind outside those groups
gets `Ready=False` naming the missing permission, a Warning, and a watch that backs off until the permission comes.

The AGL runs here as the chart's controllers ServiceAccount (a token the API issued for it, not `--as`: the
emulator ignores impersonation, §19), against the chart's rendered RBAC.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import kopf
import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier
from burrito_local.identity import admin_client, ensure_namespace, request_token, set_kubeconfig_token
from burrito_local.install import install
from burrito_local.kube_tokens import API_AUDIENCES

from burrito_py.agl.operator import register_agl
from burrito_py.api.crdgen import generate_crds
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.kube.kubeconfig import kubeconfig_login
from tests.support.emulator import wait_for

RELEASE, RELEASE_NAMESPACE = "burrito-py", "burrito-py-system"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
DEFS = "/apis/agl.burrito-py.io/v1alpha1/applicationdefinitions"
LAYERS = "/apis/terraform.burrito-py.io/v1alpha1/namespaces/default/terraformlayers"
ROLE = f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{RELEASE}-controllers"


def definition(name: str, kind: str, group: str | None) -> dict[str, Any]:
    application: dict[str, Any] = {"kind": kind, "plural": name, "singular": name[:-1], "openAPISchema": {
        "type": "object", "properties": {"size": {"type": "integer"}}}}
    if group:
        application["group"] = group
    return {"apiVersion": "agl.burrito-py.io/v1alpha1", "kind": "ApplicationDefinition", "metadata": {"name": name},
            "spec": {"application": application, "backend": {"type": "Terraform", "terraform": {
                "repository": {"name": "modules"}, "branch": "main", "path": name, "prefix": f"{name}-"}}}}


def ready(admin: httpx.Client, name: str) -> dict[str, Any] | None:
    body = admin.get(f"{DEFS}/{name}").json()
    return next((c for c in (body.get("status") or {}).get("conditions") or () if c["type"] == "Ready"), None)


@pytest.fixture
def agl_as_controllers(tmp_path: Path) -> Iterator[tuple[ApiServer, httpx.Client]]:
    from burrito_py.chart.chart import render_chart

    with ApiServer(pod_log_dir=tmp_path / "logs") as api:
        admin_kubeconfig = api.write_kubeconfig(tmp_path / "admin-kubeconfig")
        applier = Applier(api.url)
        for crd in generate_crds().values():
            applier.apply(crd)
        # The chart as installed: default values (no kind listed), `default` a tenant.
        objects = render_chart({"tenants": [{"namespace": "default", "create": False}]}, RELEASE, RELEASE_NAMESPACE)
        with admin_client(api.url) as admin:
            ensure_namespace(admin, RELEASE_NAMESPACE)
            install(applier, [o for o in objects if o["kind"] in RBAC_KINDS], RELEASE_NAMESPACE)
            applier.close()
            token = request_token(admin, RELEASE_NAMESPACE, f"{RELEASE}-controllers", list(API_AUDIENCES))
            kubeconfig = tmp_path / "controllers-kubeconfig"
            shutil.copy(admin_kubeconfig, kubeconfig)
            set_kubeconfig_token(kubeconfig, token)
            registry = kopf.OperatorRegistry()
            kopf.on.login(registry=registry)(lambda **_: kubeconfig_login(kubeconfig))
            settings = ControllerSettings(namespaces=["default"], resync_interval=timedelta(hours=1))
            register_agl(registry, settings, kubeconfig)
            stop, started = threading.Event(), threading.Event()
            thread = threading.Thread(target=lambda: asyncio.run(kopf.operator(
                registry=registry, standalone=True, namespaces=["default"], stop_flag=stop, ready_flag=started)),
                daemon=True)
            thread.start()
            assert started.wait(30)
            try:
                yield api, admin
            finally:
                stop.set()
                thread.join(30)


def test_a_kind_added_after_install_in_an_agl_group_is_served_and_compiled(
        agl_as_controllers: tuple[ApiServer, httpx.Client]) -> None:
    _, admin = agl_as_controllers
    admin.post(DEFS, json=definition("widgets", "Widget", None)).raise_for_status()  # apps.burrito-py.io
    wait_for(lambda: (c := ready(admin, "widgets")) and c["status"] == "True" and c["reason"] == "Served", 30,
             interval=0.05, what="widgets served")
    admin.post("/apis/apps.burrito-py.io/v1alpha1/namespaces/default/widgets", json={
        "apiVersion": "apps.burrito-py.io/v1alpha1", "kind": "Widget", "metadata": {"name": "w1"},
        "spec": {"size": 2}}).raise_for_status()
    layer = wait_for(lambda: (r := admin.get(f"{LAYERS}/widgets-w1")).status_code == 200 and r.json(), 30,
                     interval=0.05, what="the instance compiled into its layer")
    assert layer["spec"]["vars"] == {"size": 2}
    status = wait_for(lambda: admin.get("/apis/apps.burrito-py.io/v1alpha1/namespaces/default/widgets/w1").json()
                      .get("status"), 30, interval=0.05, what="the instance's status, written by the controllers")
    assert status.get("layer") == "widgets-w1"


def test_a_kind_outside_the_agl_groups_says_what_is_missing_and_backs_off(
        agl_as_controllers: tuple[ApiServer, httpx.Client]) -> None:
    api, admin = agl_as_controllers
    admin.post(DEFS, json=definition("gadgets", "Gadget", "example.org")).raise_for_status()
    cond = wait_for(lambda: (c := ready(admin, "gadgets")) and c["status"] == "False" and c, 30, interval=0.05,
                    what="gadgets not ready")
    assert cond["reason"] == "Forbidden", cond
    assert 'cannot list resource "gadgets" in API group "example.org"' in cond["message"], cond["message"]
    assert f"system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}-controllers" in cond["message"]
    assert "controllers.agl.groups" in cond["message"] and "controllers.agl.kinds" in cond["message"]

    def reasons() -> list[str]:
        events = admin.get("/api/v1/namespaces/default/events").json()["items"]
        return [e["reason"] for e in events if e["involvedObject"]["name"] == "gadgets"]

    # The event is posted just after the condition is written: wait for it, then check it is the only one.
    wait_for(reasons, 10, interval=0.05, what="the Forbidden event")
    assert reasons() == ["Forbidden"]

    # Listings of the kind back off (1, 2, 4, 8 s …), where they came every second, forever.
    api.clear_requests()
    time.sleep(12)
    listings = [r for r in api.requests if r.method == "GET" and r.path.endswith("/example.org/v1alpha1/namespaces/"
                                                                                 "default/gadgets")]
    assert 1 <= len(listings) <= 3, [round(r.time, 1) for r in listings]

    # The platform team grants the group (a helm upgrade restarts nothing): the next listing sees it.
    role = admin.get(ROLE).json()
    role["rules"].append({"apiGroups": ["example.org"], "resources": ["*"], "verbs": ["list", "watch"]})
    role["rules"].append({"apiGroups": ["example.org"], "resources": ["*/status"], "verbs": ["patch"]})
    admin.put(ROLE, json=role).raise_for_status()
    wait_for(lambda: (c := ready(admin, "gadgets")) and c["status"] == "True" and c["reason"] == "Served", 70,
             interval=0.1, what="gadgets served once granted")
