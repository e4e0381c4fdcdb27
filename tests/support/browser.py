"""Debian's Chromium driven by Playwright for the UI's browser tests: the browser fixture, a context, axe-core's
check of each page and a screenshot of it under tests/artifacts/ui/<test>/, and the UI's log-in."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")  # Debian's; scripts/test.sh installs it (never `playwright install`)
ARTIFACTS = Path(__file__).parents[1] / "artifacts" / "ui"
AXE = Path(__file__).parents[1] / "e2e" / "assets" / "axe-core" / "axe.min.js"
BLOCKING = ("serious", "critical")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        raise RuntimeError(f"{CHROMIUM} is required for the browser tests (scripts/test.sh installs Debian's)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"], headless=True)
        yield chromium
        chromium.close()


@contextlib.contextmanager
def new_context(browser: Browser, bypass_csp: bool = False) -> Iterator[BrowserContext]:
    """`bypass_csp`: for axe-core, which add_script_tag injects as an inline script (the UI's Content-Security-Policy
    refuses those, as it should); the viewer's test keeps the policy and checks that nothing broke it."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=bypass_csp)
    context.set_default_timeout(30_000)
    try:
        yield context
    finally:
        context.close()


def axe_violations(page: Page) -> list[tuple[str, str]]:
    """axe-core's violations on the page as it is now: (impact, description) per rule."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    results = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    assert results["testEngine"]["version"] == "4.14.1" and results["passes"] is not None
    return [(v["impact"], f"{v['id']}: {v['help']} at {json.dumps([n['target'] for n in v['nodes']][:5])}")
            for v in results["violations"]]


class Visits:
    """Screenshots of each page visited, under tests/artifacts/ui/<test>/, and axe-core's check of each."""

    def __init__(self, test: str, axe: bool = True) -> None:
        self.axe = axe
        self.dir = ARTIFACTS / test
        self.dir.mkdir(parents=True, exist_ok=True)
        for old in self.dir.glob("*.png"):
            old.unlink()
        self.shots: list[Path] = []
        self.minor: list[str] = []  # violations below serious, reported only

    def page(self, page: Page, name: str) -> None:
        page.wait_for_load_state("load")
        path = self.dir / f"{len(self.shots) + 1:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        self.shots.append(path)
        # Usable on a laptop screen (1280 pixels wide): nothing scrolls sideways.
        width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], f"the {name} page is {width[0]} pixels wide in a {width[1]}-pixel window"
        if self.axe:
            violations = axe_violations(page)
            blocking = [f"{impact} {what}" for impact, what in violations if impact in BLOCKING]
            assert not blocking, f"axe-core on the {name} page ({page.url}):\n" + "\n".join(blocking)
            self.minor += [f"{name}: {impact} {what}" for impact, what in violations]


def log_in(page: Page, url: str, token: str, visits: Visits | None = None) -> None:
    page.goto(f"{url}/ui/layers")
    expect(page).to_have_url(re.compile(r"/ui/login\?next="))
    if visits is not None:
        visits.page(page, "login")
    page.get_by_label("Kubernetes bearer token").fill(token)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/ui/layers$"))
