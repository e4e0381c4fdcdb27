"""The web UI (docs/architecture.md §11.4) in a real browser: headless Chromium (Debian's /usr/bin/chromium, driven
by Playwright) against the server with auth on, beside the emulator, the controllers, the local kubelet and real
terraform. Screenshots of every page visited are written to tests/artifacts/ui/<test>/ (git-ignored), and axe-core
(vendored in assets/axe-core/) checks each of them: no violation of impact serious or critical."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from burrito_local.identity import ensure_service_account, request_token
from playwright.sync_api import Browser, expect

from burrito_py.api import annotations as ann
from burrito_py.datastore.in_process import free_port
from burrito_py.kube.kubeconfig import kubeconfig_login
from burrito_py.server.serving import running_server
from burrito_py.server.settings import ServerSettings
from tests.support.browser import AXE, Visits, browser, log_in, new_context
from tests.support.git_repos import make_repo
from tests.support.real_cluster import RealCluster

from .conftest import Platform, layer_code, running_platform

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
__all__ = ["browser"]  # the Chromium fixture (tests/support/browser.py)

AXE_SHA256 = "29348999450cdf2849a8e70b7912fc2da85a849da39c0d0d5394f51d4a9ed95c"  # axe-core 4.14.1, as its README says
RBAC = "/apis/rbac.authorization.k8s.io/v1"
READ_LAYERS = [{"apiGroups": [ann.GROUP], "resources": ["terraformlayers"], "verbs": ["get", "list", "watch"]}]


@dataclass
class World:
    platform: Platform
    url: str  # the server's
    tokens: dict[str, str]  # "admin": the kubeconfig user's (cluster-admin); "viewer": may not patch layers


def _viewer_token(platform: Platform) -> str:
    """A service account that may read TerraformLayers in the test's namespace but not patch them."""
    ns = platform.namespace
    with platform.api_http() as kube:
        ensure_service_account(kube, ns, "viewer")
        kube.post(f"{RBAC}/namespaces/{ns}/roles", json={
            "metadata": {"name": "layer-viewer"}, "rules": READ_LAYERS}).raise_for_status()
        kube.post(f"{RBAC}/namespaces/{ns}/rolebindings", json={
            "metadata": {"name": "layer-viewer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "layer-viewer"},
            "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": ns}]}).raise_for_status()
        return request_token(kube, ns, "viewer", ["burrito-py"])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, real_cluster: RealCluster) -> Iterator[World]:
    """Two layers waiting for a manual approval: `app` (approved by the first test) and `other` (left pending
    for the second)."""
    tmp = tmp_path_factory.mktemp("ui-browser")
    repo = make_repo(tmp / "upstream")
    repo.commit({"layers/app/main.tf": layer_code("v1"), "layers/other/main.tf": layer_code("other")}, "layers")
    with running_platform(tmp / "p", tmp / "kubeconfig", cluster=real_cluster) as platform:
        platform.create_repository("repo", repo.url)
        for name in ("app", "other"):
            platform.create_layer(name, "repo", f"layers/{name}", approvePlan="manual")
        for name in ("app", "other"):
            platform.wait_state(name, "ApplyNeeded", timeout=90)
        settings = ServerSettings(host="127.0.0.1", port=free_port(), kubeconfig=platform.kubeconfig,
                                  auth_enabled=True, datastore_url=platform.datastore_url)
        tokens = {"admin": str(kubeconfig_login(platform.kubeconfig).token), "viewer": _viewer_token(platform)}
        with running_server(settings) as url:
            yield World(platform, url, tokens)


def test_the_vendored_axe_core_is_the_one_noted() -> None:
    assert hashlib.sha256(AXE.read_bytes()).hexdigest() == AXE_SHA256


def test_log_in_filter_read_the_plan_approve_and_watch_the_row_go_idle(world: World, browser: Browser) -> None:
    visits = Visits("approve")
    platform = world.platform
    pending = platform.layer("app")["status"]["pendingPlan"]
    with new_context(browser, bypass_csp=True) as context:
        layers = context.new_page()
        log_in(layers, world.url, world.tokens["admin"], visits)
        expect(layers.locator("header")).to_contain_text("Signed in as")

        # The filter: typing updates the table in place and the URL carries it. The view is this test's namespace:
        # the control plane is shared by the worker's tests, and the admin sees their layers named "app" too.
        layers.goto(f"{world.url}/ui/layers?namespace={platform.namespace}")
        expect(layers.locator(f'tr[data-layer="{platform.namespace}/other"]')).to_be_visible()
        layers.locator("#filter-q").press_sequentially("app", delay=50)
        expect(layers).to_have_url(re.compile(r"[?&]q=app(&|$)"))
        assert f"namespace={platform.namespace}" in layers.url
        expect(layers.locator("tr[data-layer]")).to_have_count(1)
        app_row = layers.locator(f'tr[data-layer="{world.platform.namespace}/app"]')
        expect(app_row.locator("span.badge[class*=state-]")).to_have_text("ApplyNeeded")
        visits.page(layers, "layers")
        # Set before anything changes: a reload or navigation of this page would lose it.
        layers.evaluate("window.__burritoMarker = 'no reload'")
        filtered_url = layers.url
        # From now on this page may only listen to its event stream: no list of layers is fetched again.
        fetched: list[str] = []
        layers.on("request", lambda request: fetched.append(request.url))

        # The layer's page, its pending plan, the approvals page.
        detail = context.new_page()
        detail.goto(f"{world.url}/ui/layers/{platform.namespace}/app")
        expect(detail.get_by_role("heading", level=1)).to_have_text(f"Layer {world.platform.namespace}/app")
        expect(detail.locator("main")).to_contain_text(pending["sum"])
        visits.page(detail, "layer")
        detail.get_by_role("link", name="Read the plan").click()
        expect(detail).to_have_url(re.compile(rf"/ui/runs/{world.platform.namespace}/[a-z0-9-]+/plan"))
        expect(detail.locator("#plan-summary")).to_have_text("Plan: 1 to add, 0 to change, 0 to destroy")
        expect(detail.locator("section.group-create")).to_contain_text("terraform_data.this")
        # Its attribute diff (issue 30 item 7): what the create sets, and what only the apply will know.
        attributes = detail.locator("section.group-create table.attributes")
        expect(attributes.locator("tr.attr-add", has_text="input")).to_contain_text('"v1"')
        expect(attributes.locator("tr.attr-add", has_text="output")).to_contain_text("(known after apply)")
        visits.page(detail, "plan")
        detail.goto(f"{world.url}/ui/approvals")
        expect(detail.locator(f"#approval-{world.platform.namespace}-app")).to_contain_text("Plan: 1 to add")
        expect(detail.locator(f"#approval-{world.platform.namespace}-other")).to_be_visible()
        visits.page(detail, "approvals")

        # Approve on the layer's page: htmx posts it and shows the notice in place.
        detail.goto(f"{world.url}/ui/layers/{platform.namespace}/app")
        detail.get_by_role("button", name=re.compile(r"^Approve sha256:")).click()
        expect(detail.locator("#notice")).to_have_text(
            f"approved plan {pending['sum']} of {world.platform.namespace}/app")

        # The layers page, never reloaded, follows the apply to Idle through its server-sent events.
        expect(app_row.locator("span.badge[class*=state-]")).to_have_text("Idle", timeout=120_000)
        assert layers.evaluate("window.__burritoMarker") == "no reload"
        assert layers.url == filtered_url
        assert [url for url in fetched if "/ui/layers/events" not in url] == [], fetched
        visits.page(layers, "layers-idle")

        # The apply run is on the layer's page; its own page shows the attempt.
        detail.reload()
        apply_run = detail.locator("#runs tbody tr", has_text="apply")
        expect(apply_run).to_have_count(1)
        expect(apply_run).to_contain_text("Succeeded")
        apply_run.get_by_role("link").first.click()
        expect(detail).to_have_url(re.compile(rf"/ui/runs/{world.platform.namespace}/[a-z0-9-]+$"))
        expect(detail.locator("dl.facts")).to_contain_text("apply")
        visits.page(detail, "run")
    assert platform.layer("app")["status"]["state"] == "Idle"
    print(f"screenshots: {', '.join(str(p) for p in visits.shots)}")
    print("axe-core, below serious:", *(visits.minor or ["none"]), sep="\n  ")


def test_a_user_who_may_not_patch_layers_gets_disabled_buttons_and_a_403(world: World, browser: Browser) -> None:
    visits = Visits("viewer", axe=False)  # the Content-Security-Policy stays on here: no injected axe-core
    pending = world.platform.layer("other")["status"]["pendingPlan"]
    with new_context(browser) as context:
        page = context.new_page()
        problems: list[str] = []
        page.on("console", lambda m: problems.append(f"{m.text} ({m.location.get('url')})") if m.type == "error"
                # Chromium asks for /favicon.ico once per browser by itself; the UI declares no icon.
                and not str(m.location.get("url", "")).endswith("/favicon.ico") else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        log_in(page, world.url, world.tokens["viewer"], visits)
        expect(page.locator("header")).to_contain_text(f"system:serviceaccount:{world.platform.namespace}:viewer")
        expect(page.locator(f'tr[data-layer="{world.platform.namespace}/other"]')).to_be_visible()
        visits.page(page, "layers")

        page.goto(f"{world.url}/ui/layers/{world.platform.namespace}/other")
        actions = page.locator(".actions")
        plan_now = actions.get_by_role("button", name="Plan now")
        approve = actions.get_by_role("button", name=re.compile(r"^Approve sha256:"))
        for button in (plan_now, approve):
            expect(button).to_be_disabled()
            expect(button).to_have_accessible_description(
                f"You may not patch TerraformLayers in {world.platform.namespace}.")
        visits.page(page, "layer")

        page.goto(f"{world.url}/ui/approvals")
        other = page.locator(f"#approval-{world.platform.namespace}-other")
        expect(other.get_by_role("button", name=re.compile("^Approve"))).to_be_disabled()
        visits.page(page, "approvals")

        # The endpoint refuses what the button would have sent, with this page's valid CSRF token.
        csrf = page.locator('meta[name="csrf-token"]').get_attribute("content")
        assert csrf
        base = f"{world.url}/ui/layers/{world.platform.namespace}/other"
        for action, form in (("approve", {"csrf": csrf, "sum": pending["sum"]}), ("sync", {"csrf": csrf})):
            answer = page.request.post(f"{base}/{action}", form=form, max_redirects=0)
            assert answer.status == 403, (action, answer.status, answer.text())
            assert "may not patch terraformlayers" in answer.text(), answer.text()
        # The CSRF token was good: the same POST to log out is accepted.
        assert page.request.post(f"{world.url}/ui/logout", form={"csrf": csrf}, max_redirects=0).status == 303
        assert not problems, problems  # nothing broke the Content-Security-Policy or the scripts
    annotations = world.platform.annotations("other")
    assert ann.APPROVE_PLAN not in annotations and ann.SYNC_NOW not in annotations
    assert world.platform.layer("other")["status"]["state"] == "ApplyNeeded"
