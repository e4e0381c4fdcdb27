"""The UI's State section and day-2 operations form (docs/architecture.md §11.4, §10.6, §5.12) over real HTTP: a
server with auth on before the emulator (RBAC enforced, SubjectAccessReviews answered) and a datastore with auth on
holding three versions of team-a/app's state. The UI calls the same checks as the REST API (`state_actions.py`).

Identities (rest_platform.py): `restorer` reads team-a, patches its layers and reads its Secrets; `tenant-a` reads
and patches team-a, no Secrets; `auditor` reads team-a's kinds and Secrets, patches nothing; `nobody` nothing.

The attacks: a user without rights on the layer's namespace (tenant-a on team-b; nobody on team-a) lists, diffs,
downloads, rolls back and asks for an operation through the UI: 403 each, nothing changed; a cross-site POST
(without the session's CSRF token, or with another session's) is refused before anything is checked or written."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator

import httpx
import pytest
from burrito_local.identity import ensure_service_account, request_token

from burrito_py.api import annotations as ann
from tests.integration.server.rest_platform import (
    AUDIENCE,
    NS_A,
    NS_B,
    PATCH_LAYERS,
    READ_KINDS,
    READ_SECRETS,
    STATE_SECRET,
    RestPlatform,
    account,
    create,
    grant,
    post_state_versions,
    running_rest_platform,
    tfstate,
)
from tests.integration.server.ui_platform import csrf_of, logged_in

SECRET = STATE_SECRET
VERSION_ROW = re.compile(r'<tr id="version-(\d+)">')



@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestPlatform]:
    with running_rest_platform(tmp_path_factory.mktemp("ui-state")) as p:
        post_state_versions(p)
        ensure_service_account(p.kube, NS_A, "restorer")
        grant(p.kube, "restorer", [READ_KINDS, PATCH_LAYERS, READ_SECRETS], account(NS_A, "restorer"), NS_A)
        p.tokens["restorer"] = request_token(p.kube, NS_A, "restorer", [AUDIENCE])
        yield p


@contextlib.contextmanager
def browser(platform: RestPlatform, identity: str) -> Iterator[tuple[httpx.Client, str]]:
    client, csrf = logged_in(platform, identity)
    with contextlib.closing(client):
        yield client, csrf


def serials(platform: RestPlatform) -> list[int]:
    with platform.client("auditor") as client:
        return [v["serial"] for v in client.get(f"/api/layers/{NS_A}/app/state/versions").json()]


def waiting_request(platform: RestPlatform, namespace: str, name: str) -> tuple[str | None, str | None]:
    annotations = platform.layer(namespace, name)["metadata"].get("annotations") or {}
    return annotations.get(ann.OPERATION), annotations.get(ann.OPERATION_BY)


def clear_request(platform: RestPlatform, namespace: str, name: str) -> None:
    """What the layer controller does once it has created the run."""
    platform.kube.patch(f"/apis/{ann.API_VERSION}/namespaces/{namespace}/terraformlayers/{name}",
                        content=json.dumps({"metadata": {"annotations": {ann.OPERATION: None,
                                                                         ann.OPERATION_BY: None}}}),
                        headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()


# -- reading ----------------------------------------------------------------------------------------------------
def test_the_layer_page_lists_the_kept_versions_newest_first_without_a_value(platform: RestPlatform) -> None:
    with browser(platform, "restorer") as (client, _):
        page = client.get(f"/ui/layers/{NS_A}/app")
    assert page.status_code == 200, page.text
    assert '<h2 id="state">State</h2>' in page.text
    assert VERSION_ROW.findall(page.text)[:3] == ["3", "2", "1"]
    assert SECRET not in page.text and "a-1" not in page.text
    assert "rollback of" not in page.text  # none of them is one
    # restorer may download and roll back: links and enabled buttons (not for the current version)
    assert f'href="/ui/layers/{NS_A}/app/state/versions/2" download' in page.text
    assert re.search(r'<button type="submit" form="rollback-1" >Roll back to 1</button>', page.text)
    assert 'form="rollback-3"' not in page.text


def test_a_reader_without_secrets_sees_no_download_link_and_disabled_rollbacks(platform: RestPlatform) -> None:
    with browser(platform, "tenant-a") as (client, csrf):
        page = client.get(f"/ui/layers/{NS_A}/app")
        assert VERSION_ROW.findall(page.text)[-3:] == ["3", "2", "1"]
        assert "/state/versions/2" not in page.text
        assert re.search(r'form="rollback-1" disabled aria-describedby="why-rollback"', page.text)
        assert "A rollback needs patch on TerraformLayers and get on Secrets" in page.text
        # and the endpoints refuse it anyway, with the reason
        download = client.get(f"/ui/layers/{NS_A}/app/state/versions/2")
        before = serials(platform)
        rollback = client.post(f"/ui/layers/{NS_A}/app/state/rollback", data={"csrf": csrf, "serial": "1"})
    assert download.status_code == 403 and "a state holds every secret of the layer" in download.text
    assert SECRET not in download.text
    assert rollback.status_code == 403 and "get secrets in the namespace team-a" in rollback.text
    assert serials(platform) == before


def test_the_diff_page_names_resources_and_attributes_never_a_value(platform: RestPlatform) -> None:
    with browser(platform, "tenant-a") as (client, _):
        latest = client.get(f"/ui/layers/{NS_A}/app/state/diff")
        chosen = client.get(f"/ui/layers/{NS_A}/app/state/diff", params={"from": "1", "to": "3"})
        missing = client.get(f"/ui/layers/{NS_A}/app/state/diff", params={"from": "1", "to": "9"})
        bad = client.get(f"/ui/layers/{NS_A}/app/state/diff", params={"from": "-1"})
    assert latest.status_code == 200, latest.text
    assert "version 2 → 3" in latest.text
    assert re.search(r'<ul id="state-added"><li><code>terraform_data.c</code></li></ul>', latest.text)
    assert re.search(r'<ul id="state-removed"><li><code>terraform_data.a</code></li></ul>', latest.text)
    assert "<tr><td><code>terraform_data.b</code></td><td><code>input</code></td></tr>" in latest.text
    assert "<li><code>terraform_data.b</code></li><li><code>terraform_data.c</code></li>" in chosen.text
    for answer in (latest, chosen):
        assert SECRET not in answer.text and "b-3" not in answer.text
    assert missing.status_code == 404 and "has no state version 9" in missing.text
    assert bad.status_code == 400 and "from: &#39;-1&#39; is not a state serial" in bad.text


def test_a_user_allowed_to_read_secrets_downloads_a_version(platform: RestPlatform) -> None:
    with browser(platform, "auditor") as (client, _):
        page = client.get(f"/ui/layers/{NS_A}/app")
        answer = client.get(f"/ui/layers/{NS_A}/app/state/versions/2")
        missing = client.get(f"/ui/layers/{NS_A}/app/state/versions/99")
    assert "/state/versions/2\" download" in page.text
    assert answer.status_code == 200 and answer.content == tfstate(2, ["a", "b"])
    assert answer.headers["content-disposition"] == 'attachment; filename="app-2.tfstate"'
    assert missing.status_code == 404 and "has no state version 99" in missing.text


# -- the attacks ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("identity", "namespace", "layer"), [("tenant-a", NS_B, "network"), ("nobody", NS_A, "app")])
def test_a_user_without_rights_on_the_namespace_gets_nothing_through_the_ui(
        platform: RestPlatform, identity: str, namespace: str, layer: str) -> None:
    """Attack: a user with no grant on the layer's namespace (but a valid session and its CSRF token) asks the UI
    for the versions, a diff, a download, a rollback and a state rm: 403 each, no serial, no address, no value, no
    version written, no request left on the layer."""
    base = f"/ui/layers/{namespace}/{layer}"
    before = serials(platform)
    with browser(platform, identity) as (client, csrf):
        reads = [client.get(base), client.get(f"{base}/state/diff", params={"from": "1", "to": "3"}),
                 client.get(f"{base}/state/versions/1")]
        rollback = client.post(f"{base}/state/rollback", data={"csrf": csrf, "serial": "1"})
        operation = client.post(f"{base}/operations", data={"csrf": csrf, "operation": "state-rm",
                                                            "address": "terraform_data.a"})
    for answer in (*reads, rollback, operation):
        assert answer.status_code == 403, (answer.request.url, answer.text[:300])
        assert "terraform_data" not in answer.text and SECRET not in answer.text and "lineage" not in answer.text
    assert serials(platform) == before
    assert waiting_request(platform, namespace, layer) == (None, None)


@pytest.mark.parametrize("csrf", [None, "0" * 64, "another session's"])
def test_a_cross_site_post_without_the_sessions_csrf_token_is_refused(platform: RestPlatform,
                                                                      csrf: str | None) -> None:
    """Attack: a page elsewhere makes restorer's browser post a rollback and a state rm (the cookie goes along;
    SameSite aside): without this session's CSRF token, 403 and nothing written."""
    before = serials(platform)
    with browser(platform, "restorer") as (client, _), browser(platform, "auditor") as (_, other):
        token = other if csrf == "another session's" else csrf
        data = {"serial": "1", **({"csrf": token} if token else {})}
        rollback = client.post(f"/ui/layers/{NS_A}/app/state/rollback", data=data)
        operation = client.post(f"/ui/layers/{NS_A}/app/operations", data={
            "operation": "state-rm", "address": "terraform_data.a", **({"csrf": token} if token else {})})
    for answer in (rollback, operation):
        assert answer.status_code == 403 and "CSRF token" in answer.text
    assert serials(platform) == before
    assert waiting_request(platform, NS_A, "app") == (None, None)


# -- rollback -------------------------------------------------------------------------------------------------
def test_no_rollback_while_the_state_is_locked_the_reason_shown(platform: RestPlatform) -> None:
    admin = {"Authorization": f"Bearer {platform.tokens['controller']}"}
    lock_url = f"{platform.datastore_url}/api/v1/layers/{NS_A}/app/state/lock"
    info = json.dumps({"ID": "a-run-holds-it", "Operation": "OperationTypeApply"}).encode()
    assert httpx.request("LOCK", lock_url, content=info, headers=admin).status_code == 200
    before = serials(platform)
    try:
        with browser(platform, "restorer") as (client, csrf):
            answer = client.post(f"/ui/layers/{NS_A}/app/state/rollback", data={"csrf": csrf, "serial": "2"})
        assert answer.status_code == 409 and "the state is locked" in answer.text, answer.text
        assert serials(platform) == before
    finally:
        httpx.request("UNLOCK", lock_url, content=info, headers=admin)


def test_a_rollback_from_the_ui_is_a_new_version_recorded_with_the_user(platform: RestPlatform) -> None:
    who = f"system:serviceaccount:{NS_A}:restorer"
    with browser(platform, "restorer") as (client, csrf):
        current = serials(platform)[-1]
        answer = client.post(f"/ui/layers/{NS_A}/app/state/rollback", data={"csrf": csrf, "serial": "1"})
        assert answer.status_code == 200, answer.text
        assert f"rolled back to version 1: new version {current + 1}" in answer.text
        page = client.get(f"/ui/layers/{NS_A}/app")
        again = client.post(f"/ui/layers/{NS_A}/app/state/rollback", data={"csrf": csrf, "serial": str(current + 1)})
        missing = client.post(f"/ui/layers/{NS_A}/app/state/rollback", data={"csrf": csrf, "serial": "42"})
        empty = client.post(f"/ui/layers/{NS_A}/app/state/rollback", data={"csrf": csrf})
    assert VERSION_ROW.findall(page.text)[0] == str(current + 1)
    assert f'<span class="badge">rollback of 1 by {who}</span>' in page.text
    assert again.status_code == 409 and "already the current state" in again.text
    assert missing.status_code == 404 and "no state version 42" in missing.text
    assert empty.status_code == 400 and "serial: which version to restore is missing" in empty.text
    events = platform.kube.get(f"/api/v1/namespaces/{NS_A}/events").json()["items"]
    assert f"state rolled back to version 1 by {who}: new version {current + 1}" in [
        e["message"] for e in events if e.get("reason") == "StateRolledBack"]


# -- day-2 operations ---------------------------------------------------------------------------------------------
def test_the_operations_form_asks_as_the_user_through_the_rest_checks(platform: RestPlatform) -> None:
    who = f"system:serviceaccount:{NS_A}:tenant"
    with browser(platform, "tenant-a") as (client, csrf):
        page = client.get(f"/ui/layers/{NS_A}/app")
        assert '<h2 id="operations">Day-2 operations</h2>' in page.text
        option = client.post(f"/ui/layers/{NS_A}/app/operations", data={
            "csrf": csrf, "operation": "state-rm", "address": "-lock=false"})
        unknown = client.post(f"/ui/layers/{NS_A}/app/operations", data={"csrf": csrf, "operation": "destroy"})
        assert waiting_request(platform, NS_A, "app") == (None, None)
        asked = client.post(f"/ui/layers/{NS_A}/app/operations", data={
            "csrf": csrf, "operation": "plan", "replace": "terraform_data.a\r\nterraform_data.b\r\n",
            "target": "", "address": "ignored: not a field of a plan"})
        twice = client.post(f"/ui/layers/{NS_A}/app/operations", data={
            "csrf": csrf, "operation": "force-unlock", "lock_id": "6f1c"})
    try:
        assert option.status_code == 400 and "address: &#39;-lock=false&#39; starts with &#39;-&#39;" in option.text
        assert unknown.status_code == 400 and "operation: &#39;destroy&#39; is not one of" in unknown.text
        assert asked.status_code == 200, asked.text
        assert f"-replace=terraform_data.a -replace=terraform_data.b on {NS_A}/app (as {who})" in asked.text
        request, by = waiting_request(platform, NS_A, "app")
        assert by == who and request is not None
        assert {k: v for k, v in json.loads(request).items() if k != "requestedAt"} == {
            "operation": "plan", "replace": ["terraform_data.a", "terraform_data.b"]}
        assert twice.status_code == 409 and f"already has an operation request waiting (asked by {who})" in twice.text
    finally:
        clear_request(platform, NS_A, "app")


def test_a_user_who_may_not_patch_sees_the_form_disabled_and_gets_403(platform: RestPlatform) -> None:
    with browser(platform, "auditor") as (client, csrf):
        page = client.get(f"/ui/layers/{NS_A}/app")
        answer = client.post(f"/ui/layers/{NS_A}/app/operations", data={
            "csrf": csrf, "operation": "state-rm", "address": "terraform_data.a"})
    assert 'disabled aria-describedby="why-operation">Ask for it</button>' in page.text
    assert answer.status_code == 403 and "patch terraformlayers in the namespace team-a" in answer.text
    assert waiting_request(platform, NS_A, "app") == (None, None)


def test_a_csrf_token_on_the_page_is_this_sessions(platform: RestPlatform) -> None:
    """The forms carry the page's token (what the POSTs above send)."""
    with browser(platform, "restorer") as (client, csrf):
        page = client.get(f"/ui/layers/{NS_A}/app")
    assert csrf_of(page.text) == csrf
    assert f'<input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="serial" value="1">' in page.text


def test_attack_a_layer_naming_another_namespaces_repository_never_tells_whether_it_exists(
        platform: RestPlatform) -> None:
    """Attack test: the layer page showed its State section when the layer's repository has `state.managed`, and
    read that repository with the server's own rights wherever the layer pointed. A tenant who may edit layers of
    team-a only named `team-b/<guess>` in one and learned, page by page, which repositories team-b has (the
    example repositories manage their state). Now another namespace's repository is read only where the user may
    get repositories, and counts only when shared with the layer's namespace; so the two pages read the same."""
    kube = platform.kube
    create(kube, "terraformrepositories", NS_B, {
        "kind": "TerraformRepository", "metadata": {"name": "secret-repo"},
        "spec": {"repository": {"url": "https://example.com/secret.git"}, "state": {"managed": True}}})
    for name, target in (("probe-found", "secret-repo"), ("probe-missing", "no-such-repo")):
        create(kube, "terraformlayers", NS_A, {
            "kind": "TerraformLayer", "metadata": {"name": name},
            "spec": {"repository": {"namespace": NS_B, "name": target}, "branch": "main", "path": "x"}})
    with browser(platform, "tenant-a") as (client, _):
        pages = [client.get(f"/ui/layers/{NS_A}/{name}") for name in ("probe-found", "probe-missing")]
    for page in pages:
        assert page.status_code == 200, page.text[:300]
        assert '<h2 id="state">State</h2>' not in page.text
    # Shared with team-a, and read by someone who may get team-b's repositories: its setting counts.
    kube.patch(f"/apis/{ann.API_VERSION}/namespaces/{NS_B}/terraformrepositories/secret-repo",
               content=json.dumps({"spec": {"allowedNamespaces": [NS_A]}}),
               headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()
    with browser(platform, "person") as (client, _):
        assert '<h2 id="state">State</h2>' in client.get(f"/ui/layers/{NS_A}/probe-found").text
    with browser(platform, "tenant-a") as (client, _):
        assert '<h2 id="state">State</h2>' not in client.get(f"/ui/layers/{NS_A}/probe-found").text
