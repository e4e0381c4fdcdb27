"""The UI's State section and day-2 operations form (docs/architecture.md §11.4) in a real browser: headless Chromium
(Debian's /usr/bin/chromium, driven by Playwright, as test_ui_browser.py) against the server with auth on, the
emulator (RBAC enforced) and a datastore with auth on holding three versions of team-a/app's state, posted through
the datastore's state backend as a runner's terraform posts them. Screenshots go to tests/artifacts/ui/state/ and
axe-core checks each page (no serious or critical violation)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from burrito_local.identity import ensure_service_account, request_token
from playwright.sync_api import Browser, expect

from burrito_py.api import annotations as ann
from tests.integration.server.rest_platform import (
    AUDIENCE,
    NS_A,
    PATCH_LAYERS,
    READ_KINDS,
    READ_SECRETS,
    STATE_SECRET,
    RestPlatform,
    account,
    grant,
    post_state_versions,
    running_rest_platform,
)
from tests.support.browser import Visits, browser, log_in, new_context

pytestmark = [pytest.mark.slow]
__all__ = ["browser"]  # the Chromium fixture (tests/support/browser.py)
SECRET = STATE_SECRET



@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestPlatform]:
    with running_rest_platform(tmp_path_factory.mktemp("ui-state-browser")) as p:
        post_state_versions(p)
        ensure_service_account(p.kube, NS_A, "restorer")
        grant(p.kube, "restorer", [READ_KINDS, PATCH_LAYERS, READ_SECRETS], account(NS_A, "restorer"), NS_A)
        p.tokens["restorer"] = request_token(p.kube, NS_A, "restorer", [AUDIENCE])
        yield p


def test_compare_two_versions_roll_back_and_ask_for_a_state_rm(platform: RestPlatform, browser: Browser) -> None:
    visits = Visits("state")
    who = f"system:serviceaccount:{NS_A}:restorer"
    with new_context(browser, bypass_csp=True) as context:
        page = context.new_page()
        log_in(page, platform.server_url, platform.tokens["restorer"], visits)
        page.goto(f"{platform.server_url}/ui/layers/{NS_A}/app")
        versions = page.locator("#state-versions tbody tr")
        expect(versions).to_have_count(3)
        expect(versions.first).to_contain_text("3")
        expect(page.locator("main")).not_to_contain_text(SECRET)
        visits.page(page, "layer-state")

        # Compare version 1 with the current one (3): radio buttons, then the button.
        page.get_by_label("compare from version 1").check()
        page.get_by_role("button", name="Show the difference").click()
        expect(page).to_have_url(re.compile(r"/state/diff\?(from=1&to=3|to=3&from=1)$"))
        expect(page.get_by_role("heading", level=1)).to_contain_text("version 1 → 3")
        expect(page.locator("#state-added")).to_have_text(re.compile(r"terraform_data\.b\s*terraform_data\.c"))
        expect(page.locator("#state-removed")).to_have_text("terraform_data.a")
        expect(page.locator("main")).not_to_contain_text(SECRET)
        visits.page(page, "state-diff")

        # Roll back to version 1: a new version 4, recorded with who asked.
        page.go_back()
        page.get_by_role("button", name="Roll back to 1").click()
        expect(page.get_by_role("status").filter(has_text="rolled back")).to_contain_text(
            f"state of {NS_A}/app rolled back to version 1: new version 4")
        visits.page(page, "rolled-back")
        page.get_by_role("link", name="Back to the layer").click()
        expect(versions).to_have_count(4)
        expect(versions.first).to_contain_text(f"rollback of 1 by {who}")

        # A refusal shows its reason: the current version cannot be restored again (no button), a state rm of an
        # option-looking address is refused naming the field.
        page.get_by_label("Operation").select_option("state-rm")
        page.get_by_label("Address (import, state rm)").fill("-lock=false")
        page.get_by_role("button", name="Ask for it").click()
        expect(page.get_by_role("alert")).to_contain_text("address: '-lock=false' starts with '-'")
        visits.page(page, "operation-refused")
        page.go_back()
        page.get_by_label("Operation").select_option("state-rm")
        page.get_by_label("Address (import, state rm)").fill("terraform_data.a")
        page.get_by_role("button", name="Ask for it").click()
        expect(page.get_by_role("status").filter(has_text="asked for")).to_contain_text(
            f"asked for state rm terraform_data.a on {NS_A}/app (as {who})")
    annotations = platform.layer(NS_A, "app")["metadata"]["annotations"]
    assert annotations[ann.OPERATION_BY] == who
    assert json.loads(annotations[ann.OPERATION])["address"] == "terraform_data.a"
    assert not [m for m in visits.minor if "state" in m and "serious" in m]


def test_a_reader_without_secrets_sees_no_download_and_disabled_rollbacks(platform: RestPlatform,
                                                                          browser: Browser) -> None:
    with new_context(browser) as context:  # the Content-Security-Policy kept: nothing of the page needs more
        page = context.new_page()
        log_in(page, platform.server_url, platform.tokens["tenant-a"])
        page.goto(f"{platform.server_url}/ui/layers/{NS_A}/app")
        expect(page.locator("#state-versions tbody tr").first).to_be_visible()
        expect(page.get_by_role("link", name="download")).to_have_count(0)
        for button in page.get_by_role("button", name=re.compile(r"^Roll back to")).all():
            expect(button).to_be_disabled()
        expect(page.locator("#why-rollback")).to_contain_text("get on Secrets")
