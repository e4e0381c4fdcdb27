"""The web UI (docs/architecture.md §11.4) over real HTTP: a server with auth on in front of the emulator (RBAC
enforced, SubjectAccessReviews answered) and a datastore with auth on."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator

import httpx
import pytest

from burrito_py.api import annotations as ann
from burrito_py.datastore.in_process import free_port
from burrito_py.plans.model import parse_plan
from burrito_py.server.serving import running_server
from tests.integration.server.rest_platform import NS_A, NS_B, READ_KINDS, REPO_URL, RestPlatform, grant
from tests.integration.server.ui_platform import (
    BULK,
    BULK_LAYERS,
    DIFF_RUN,
    HOSTILE_RUN,
    PENDING_SUM,
    SECRET_FED,
    csrf_of,
    fixture_run,
    logged_in,
    running_ui_platform,
    status,
)
from tests.unit.plans.plan_fixtures import SECRET, fixture, fixture_names
from tests.unit.plans.test_plan_model import EXPECTED

ROW = re.compile(r'<tr id="layer:[^"]+" data-layer="([a-z0-9.-]+)/([a-z0-9.-]+)">')
SUMMARY = re.compile(r'<p class="summary" id="plan-summary"><strong>([^<]*)</strong>')
ATTRIBUTE_ROW = re.compile(r'<tr class="attr-[a-z]+"><td><code>([^<]*)</code>( <span class="badge forces">forces '
                           r'replacement</span>)?</td>\n<td>(.*?)</td><td>(.*?)</td></tr>')
FORCES = ' <span class="badge forces">forces replacement</span>'
GROUP_COUNT = re.compile(r'<section class="group group-([a-z]+)".*?data-count="(\d+)"', re.S)


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestPlatform]:
    with running_ui_platform(tmp_path_factory.mktemp("ui")) as p:
        yield p


@pytest.fixture(scope="module")
def alice(platform: RestPlatform) -> Iterator[tuple[httpx.Client, str]]:
    client, csrf = logged_in(platform, "alice")
    yield client, csrf
    client.close()


@pytest.fixture(scope="module")
def bob(platform: RestPlatform) -> Iterator[tuple[httpx.Client, str]]:
    client, csrf = logged_in(platform, "bob")
    yield client, csrf
    client.close()


def rows(html: str) -> list[tuple[str, str]]:
    return ROW.findall(html)


# -- login -------------------------------------------------------------------------------------------------------
def test_pages_send_an_anonymous_browser_to_the_login_form(platform: RestPlatform) -> None:
    with httpx.Client(base_url=platform.server_url) as browser:
        for page in ("/ui/layers?state=Idle", f"/ui/layers/{NS_A}/app", "/ui/approvals", "/ui/pull-requests"):
            answer = browser.get(page)
            assert answer.status_code == 303 and answer.headers["location"].startswith("/ui/login?next="), page
        assert browser.get("/ui/layers/events").status_code == 401
        form = browser.get("/ui/login")
        assert form.status_code == 200 and 'name="token"' in form.text and '<label for="token">' in form.text
        assert "default-src 'self'" in form.headers["content-security-policy"]
        sid = browser.cookies.get("burrito_py_sid")
        assert sid and "httponly" in form.headers["set-cookie"].lower()
        assert "samesite=strict" in form.headers["set-cookie"].lower()


def test_login_with_a_token_then_pages_then_logout(platform: RestPlatform) -> None:
    client, csrf = logged_in(platform, "bob")
    with contextlib.closing(client):
        sealed = client.cookies.get("burrito_py_session")
        assert sealed and platform.tokens["bob"] not in sealed  # encrypted, never the token itself
        assert "system:serviceaccount:team-a:bob" in client.get("/ui/layers").text
        assert client.post("/ui/logout", data={"csrf": csrf}).status_code == 303
        assert client.get("/ui/layers").status_code == 303


@pytest.mark.parametrize("identity", ["garbage", "expired", "forged", "wrong-audience"])
def test_a_bad_token_is_refused(platform: RestPlatform, identity: str) -> None:
    with httpx.Client(base_url=platform.server_url) as browser:
        form = browser.get("/ui/login")
        answer = browser.post("/ui/login", data={"csrf": csrf_of(form.text), "token": platform.tokens[identity]})
        assert answer.status_code == 401 and "did not accept" in answer.text
        assert platform.tokens[identity] not in answer.text
        assert "burrito_py_session" not in browser.cookies
        assert browser.get("/ui/layers").status_code == 303


def test_a_forged_session_cookie_is_no_session(platform: RestPlatform) -> None:
    with httpx.Client(base_url=platform.server_url, cookies={"burrito_py_session": "gAAAAAB-forged"}) as browser:
        assert browser.get("/ui/layers").status_code == 303


def test_login_needs_the_csrf_token(platform: RestPlatform) -> None:
    with httpx.Client(base_url=platform.server_url) as browser:
        browser.get("/ui/login")
        answer = browser.post("/ui/login", data={"csrf": "0" * 64, "token": platform.tokens["alice"]})
        assert answer.status_code == 403 and "burrito_py_session" not in browser.cookies


def test_trusted_headers_only_on_their_own_listener(platform: RestPlatform) -> None:
    """Attack (finding 13): a forged X-Forwarded-User on the public port (the one webhooks need) is ignored, even
    with trusted-header mode on; only the separate listener the proxy alone reaches reads it. Before the fix the
    public port took the header as the user when the mode was on."""
    headers = {"X-Forwarded-User": "jane@example.com", "X-Forwarded-Groups": "ops, sre"}
    with httpx.Client(base_url=platform.server_url, headers=headers) as browser:
        assert browser.get("/ui/layers").status_code == 303  # ignored: the setting is off
    grant(platform.kube, "sre-viewers", [READ_KINDS], {"kind": "Group", "name": "sre",
                                                       "apiGroup": "rbac.authorization.k8s.io"})
    assert platform.settings is not None
    trusted_port = free_port()
    settings = platform.settings.model_copy(update={"port": free_port(), "ui_trusted_headers": True,
                                                    "ui_trusted_headers_port": trusted_port})
    with running_server(settings) as url:
        with httpx.Client(base_url=url, headers=headers) as browser:
            page = browser.get("/ui/layers")
            assert page.status_code == 303 and "jane" not in page.text  # the public port: no such user
            assert browser.get("/ui/layers/events").status_code == 401
        with httpx.Client(base_url=f"http://127.0.0.1:{trusted_port}", headers=headers) as browser:
            page = browser.get("/ui/layers")
            assert page.status_code == 200 and "jane@example.com" in page.text
            # jane reads through her group sre, and may patch nothing: the review says no, with her groups.
            approvals = browser.get("/ui/approvals").text
            assert re.search(r'<button type="submit" class="approve" disabled', approvals)


# -- layers ------------------------------------------------------------------------------------------------------
def test_layers_page_lists_rows_with_their_columns(alice: tuple[httpx.Client, str]) -> None:
    client, _ = alice
    page = client.get("/ui/layers", params={"namespace": NS_A})
    assert page.status_code == 200
    assert rows(page.text) == [(NS_A, "app")]
    row = page.text[page.text.index('data-layer="team-a/app"'):]
    row = row[:row.index("</tr>")]
    for text in ("ApplyNeeded", "Plan: 1 to add, 0 to change, 0 to destroy", "Drifted", "GatesAutoApply",
                 f"{NS_A}/infra", "main", "app"):
        assert text in row, text
    assert "hunter2" not in page.text and REPO_URL not in page.text


def test_layers_are_paged_fifty_at_a_time(alice: tuple[httpx.Client, str]) -> None:
    client, _ = alice
    first = client.get("/ui/layers", params={"namespace": BULK})
    assert rows(first.text) == [(BULK, f"layer-{i:03d}") for i in range(50)]
    assert f"{BULK_LAYERS} layers, page 1 of 3" in first.text
    last = client.get("/ui/layers", params={"namespace": BULK, "page": "3"})
    assert rows(last.text) == [(BULK, f"layer-{i:03d}") for i in range(100, BULK_LAYERS)]
    assert 'rel="prev"' in last.text and 'rel="next"' not in last.text
    beyond = client.get("/ui/layers", params={"namespace": BULK, "page": "99"})
    assert rows(beyond.text) == rows(last.text)


def test_filters_and_sorting_from_the_query_string(alice: tuple[httpx.Client, str]) -> None:
    client, _ = alice

    def names(**params: str) -> list[str]:
        return [f"{ns}/{name}" for ns, name in rows(client.get("/ui/layers", params=params).text)]

    assert names(state="MaxRetriesReached") == [f"{NS_B}/network"]
    assert names(namespace=BULK, drift="Drifted") == [f"{BULK}/layer-{i:03d}" for i in range(0, BULK_LAYERS, 10)]
    assert names(repository="mono", state="PlanNeeded", q="stacks/odd") == [
        f"{BULK}/layer-{i:03d}" for i in range(BULK_LAYERS) if i % 3 == 0 and i % 2][:50]
    assert names(repository=f"{NS_A}/infra") == [f"{NS_A}/app", f"{NS_B}/network"]
    assert names(namespace=BULK, sort="name", dir="desc")[:2] == [f"{BULK}/layer-119", f"{BULK}/layer-118"]
    assert names(q="nothing-matches-this") == []
    # The page links keep the filters (bookmarkable views).
    html = client.get("/ui/layers", params={"namespace": BULK, "drift": "Drifted", "sort": "state"}).text
    assert 'namespace=bulk&amp;drift=Drifted&amp;sort=state' in html


def test_htmx_asks_for_the_table_alone(alice: tuple[httpx.Client, str]) -> None:
    client, _ = alice
    part = client.get("/ui/layers", params={"namespace": BULK}, headers={"HX-Request": "true",
                                                                        "HX-Target": "layer-table"})
    assert part.text.lstrip().startswith('<div id="layer-table"') and "<html" not in part.text
    assert len(rows(part.text)) == 50


def test_layer_page(alice: tuple[httpx.Client, str]) -> None:
    client, _ = alice
    html = client.get(f"/ui/layers/{NS_A}/app").text
    for text in ("IsPlanArtifactUpToDate", "PlanIsRecent", PENDING_SUM, "endpoint", "db_password",
                 f"{NS_B}/network", "UpstreamFailed", "aa-app-apply-new", "zz-app-plan-old"):
        assert text in html, text
    runs = html[html.index('<table id="runs">'):]
    assert runs.index("aa-app-apply-new") < runs.index("zz-app-plan-old")  # newest first
    assert client.get(f"/ui/layers/{NS_A}/missing").status_code == 404


# -- plans ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", fixture_names())
def test_plan_page_counts_match_terraforms_summary(alice: tuple[httpx.Client, str], name: str) -> None:
    client, _ = alice
    page = client.get(f"/ui/runs/{NS_A}/{fixture_run(name)}/plan")
    assert page.status_code == 200, page.text
    summary = SUMMARY.search(page.text)
    assert summary and summary.group(1) == EXPECTED[name][0]
    groups = {g: int(n) for g, n in GROUP_COUNT.findall(page.text)}
    found = {word: int(n) for n, word in re.findall(r"(\d+) to (add|change|destroy|import)", summary.group(1))}
    assert groups.get("create", 0) + groups.get("replace", 0) == found.get("add", 0)
    assert groups.get("update", 0) == found.get("change", 0)
    assert groups.get("delete", 0) + groups.get("replace", 0) == found.get("destroy", 0)
    assert groups.get("import", 0) == found.get("import", 0)
    assert groups.get("moved", 0) == parse_plan(fixture(name)).counts.moved
    assert SECRET not in page.text
    if groups.get("delete") or groups.get("replace"):
        assert 'class="destroy-warning"' in page.text and '<li class="destroys">' in page.text


def test_plan_page_names_replace_reasons_and_downloads_masked(alice: tuple[httpx.Client, str]) -> None:
    client, _ = alice
    html = client.get(f"/ui/runs/{NS_A}/{fixture_run('replace')}/plan").text
    assert "a changed attribute forces replacement" in html and "terraform_data.db" in html
    download = client.get(f"/ui/runs/{NS_A}/{fixture_run('sensitive')}/plan/download")
    assert download.status_code == 200 and "attachment" in download.headers["content-disposition"]
    assert SECRET not in download.text and json.loads(download.text)["resource_changes"]
    assert client.get(f"/ui/runs/{NS_A}/no-such-run/plan").status_code == 404


def test_plan_page_shows_the_attribute_diff_of_a_real_plan(alice: tuple[httpx.Client, str]) -> None:
    """terraform 1.11.4's plan (diff/attributes.json): each changed attribute with before and after, the one
    forcing the replace marked, the sensitive variable `(sensitive)` on both sides, unknown values named."""
    client, _ = alice
    page = client.get(f"/ui/runs/{NS_A}/{DIFF_RUN}/plan")
    assert page.status_code == 200, page.text
    rows = set(ATTRIBUTE_ROW.findall(page.text))
    code, none = "<code>&#34;{}&#34;</code>".format, '<span class="hint">none</span>'
    sensitive, unknown = '<em class="marker">(sensitive)</em>', '<em class="marker">(known after apply)</em>'
    for row in (("triggers_replace[0]", FORCES, code("v1"), code("v2")),
                ("input.tags.Name", "", code("web-1"), code("web-2")),
                ("input.ingress[0].cidr_blocks[1]", "", code("192.168.0.0/16"), code("172.16.0.0/12")),
                ("input.tags.Env", "", code("dev"), none),
                ("input", "", sensitive, sensitive),  # terraform_data.secret
                ("input", "", none, code("fresh")), ("id", "", none, unknown)):  # terraform_data.new
        assert row in rows, row
    assert "new-sensitive-password-2" not in page.text
    assert page.text.count('<table class="attributes">') == 4


def test_attack_hostile_attribute_values_are_escaped_on_the_plan_page(alice: tuple[httpx.Client, str]) -> None:
    """Attack test: values, map keys and for_each keys an author chose (`</details><img src=x onerror=…>`, a
    `<script>`, a link) are text on the page, never markup; a Secret-fed value among them is masked."""
    client, _ = alice
    page = client.get(f"/ui/runs/{NS_A}/{HOSTILE_RUN}/plan")
    assert page.status_code == 200, page.text
    html = page.text
    assert "<img" not in html and "<script>alert" not in html and "<a href='https://evil" not in html
    assert "&lt;/details&gt;&lt;img src=x onerror=alert(1)&gt;" in html
    assert html.count("<details") == html.count("</details>")
    assert SECRET_FED not in html and "(sensitive value)" in html
    assert "\u202e" not in html and "\\u202egnp.exe" in html


def test_run_page_shows_attempts_and_logs(alice: tuple[httpx.Client, str]) -> None:
    client, _ = alice
    html = client.get(f"/ui/runs/{NS_A}/zz-app-plan-old").text
    assert "provider download failed" in html and "attempt 2: terraform plan" in html
    assert "data-sse" not in html  # finished: nothing live
    live = client.get(f"/ui/runs/{NS_A}/aa-app-apply-new").text
    assert f'data-sse="/ui/runs/{NS_A}/aa-app-apply-new/events"' in live
    log = client.get(f"/ui/runs/{NS_A}/zz-app-plan-old/attempts/1/logs")
    assert log.status_code == 200 and log.content.startswith(b"attempt 1: terraform init")


# -- approvals and actions -------------------------------------------------------------------------------------
def test_approvals_and_pull_requests_pages(alice: tuple[httpx.Client, str]) -> None:
    client, _ = alice
    html = client.get("/ui/approvals").text
    assert f'id="approval-{NS_A}-app"' in html and "GatesAutoApply" in html and "no-destroy" in html
    assert html.count('id="approval-') == 1
    prs = client.get("/ui/pull-requests").text
    assert "org/infra#7" in prs and "Add a &lt;bucket&gt;" in prs and "<bucket>" not in prs


def test_a_user_without_patch_sees_disabled_buttons_and_gets_403(platform: RestPlatform,
                                                                  bob: tuple[httpx.Client, str]) -> None:
    client, csrf = bob
    html = client.get(f"/ui/layers/{NS_A}/app").text
    assert re.search(r'<button type="submit" disabled[^>]*>Plan now', html)
    assert re.search(r'<button type="submit" class="approve" disabled', html)
    for action, data in (("sync", {}), ("approve", {"sum": PENDING_SUM})):
        answer = client.post(f"/ui/layers/{NS_A}/app/{action}", data={"csrf": csrf, **data})
        assert answer.status_code == 403 and "may not patch terraformlayers" in answer.text
    annotations = platform.layer(NS_A, "app")["metadata"].get("annotations") or {}
    assert ann.APPROVE_PLAN not in annotations and ann.SYNC_NOW not in annotations


def test_csrf_is_enforced_on_actions(platform: RestPlatform, alice: tuple[httpx.Client, str]) -> None:
    client, csrf = alice
    for data in ({"sum": PENDING_SUM}, {"sum": PENDING_SUM, "csrf": "0" * 64}):
        assert client.post(f"/ui/layers/{NS_A}/app/approve", data=data).status_code == 403
    # A token from another session is worth nothing here.
    other_client, other = logged_in(platform, "bob")
    other_client.close()
    assert other != csrf
    assert client.post(f"/ui/layers/{NS_A}/app/approve", data={"sum": PENDING_SUM, "csrf": other}).status_code == 403
    assert ann.APPROVE_PLAN not in (platform.layer(NS_A, "app")["metadata"].get("annotations") or {})


def test_a_user_with_patch_approves_the_pending_sum(platform: RestPlatform, alice: tuple[httpx.Client, str]) -> None:
    client, csrf = alice
    html = client.get(f"/ui/layers/{NS_A}/app").text
    assert re.search(r'<button type="submit" class="approve" >Approve', html.replace("\n", " "))
    stale = client.post(f"/ui/layers/{NS_A}/app/approve", data={"csrf": csrf, "sum": "sha256:" + "cd" * 32})
    assert stale.status_code == 409
    answer = client.post(f"/ui/layers/{NS_A}/app/approve", data={"csrf": csrf, "sum": PENDING_SUM},
                         headers={"HX-Request": "true"})
    assert answer.status_code == 200 and "approved plan" in answer.text
    assert platform.layer(NS_A, "app")["metadata"]["annotations"][ann.APPROVE_PLAN] == PENDING_SUM
    synced = client.post(f"/ui/layers/{NS_A}/app/sync", data={"csrf": csrf})
    assert synced.status_code == 303
    assert ann.SYNC_NOW in platform.layer(NS_A, "app")["metadata"]["annotations"]
    # alice's rights stop at her namespace.
    assert client.post(f"/ui/layers/{NS_B}/network/sync", data={"csrf": csrf}).status_code == 403


def test_a_group_grant_is_honoured(platform: RestPlatform) -> None:
    client, csrf = logged_in(platform, "carol")
    with contextlib.closing(client):
        assert client.post(f"/ui/layers/{NS_B}/network/sync", data={"csrf": csrf}).status_code == 303
        assert client.post(f"/ui/layers/{NS_A}/app/sync", data={"csrf": csrf}).status_code == 403


# -- live updates --------------------------------------------------------------------------------------------
def test_the_layers_stream_sends_a_state_change(platform: RestPlatform, alice: tuple[httpx.Client, str]) -> None:
    client, _ = alice
    with client.stream("GET", "/ui/layers/events", params={"namespace": BULK}, timeout=20) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = stream.iter_lines()
        assert next(lines).startswith("retry:")
        status(platform.kube, "terraformlayers", BULK, "layer-007", {"state": "Running"})
        status(platform.kube, "terraformlayers", NS_A, "app", {"lastResult": "filtered out by namespace"})
        event, data = "", ""
        for line in lines:
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                data = line.split(":", 1)[1]
                break
        payload = json.loads(data)
        assert event == "row" and payload["id"] == f"layer:{BULK}/layer-007"
        assert "Running" in payload["html"] and 'data-layer="bulk/layer-007"' in payload["html"]
