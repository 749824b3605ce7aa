"""The web console in a real browser: Debian's Chromium, headless, driven by
Playwright, against a real `mailrun up`.

The browser logs in by the URL `up` prints, walks from the deployments to a
run, sees a mail's dispatch arrive and an approval appear without a reload
(the page keeps a marker set on ``window`` throughout), and approves it
with the button. Every Content-Security-Policy violation or script error
is a console error in Chromium, and fails the test.

Screenshots of each page go to ``build/screenshots/`` (kept after the run,
ignored by git); docs/console.png is a copy of ``run-waiting.png``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import ConsoleMessage, Page, async_playwright, expect

from tests.support import wait_for

from ..harness import mailrun_up

pytestmark = pytest.mark.anyio

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[3] / "build" / "screenshots"
WAIT = 15_000  # ms: Playwright's waits for what the page shows

GATED = """
async def main(ctx, item):
    ctx.state.setdefault("seen", []).append(item.subject)
    if item.subject == "gate <b>&":
        ctx.state["approval"] = await ctx.request_approval("ship <it>?")
"""


def _chromium() -> str:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(
            f"the console's browser tests need Chromium at {CHROMIUM}: apt-get install chromium"
            " (README's test command installs it where it is missing)"
        )
    return CHROMIUM


async def _shot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=SCREENSHOTS / f"{name}.png", full_page=True)


async def test_the_console_shows_runs_live_and_decides_an_approval(tmp_path: Path) -> None:
    chromium = _chromium()
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("gated", GATED)
        first = (await up.send(dep["address"], "hello")).json()
        run_id = first["run_id"]
        await up.wait_state(run_id, lambda r: r["state"].get("seen") == ["hello"])

        errors: list[str] = []

        def on_console(message: ConsoleMessage) -> None:
            if message.type == "error":
                errors.append(message.text)

        def on_response(status: int, url: str) -> None:
            if status >= 400:  # a refresh, a script or a decision the hub refused
                errors.append(f"{status} {url}")

        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=chromium, headless=True)
            try:
                context = await browser.new_context(viewport={"width": 900, "height": 640})
                page = await context.new_page()
                page.on("console", on_console)
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.on("response", lambda r: on_response(r.status, r.url))

                # The login URL sets the cookie and lands on the deployments.
                await page.goto(f"{up.url}/?token={up.token}")
                assert page.url == f"{up.url}/"
                deployments = page.locator("table.deployments")
                await expect(deployments).to_contain_text("gated", timeout=WAIT)
                await expect(deployments).to_contain_text(dep["address"])
                await expect(page.locator("#live")).to_have_text("live", timeout=WAIT)
                await _shot(page, "deployments")

                await page.get_by_role("link", name="gated").click()
                await expect(page.locator("table.runs")).to_contain_text(run_id, timeout=WAIT)
                await _shot(page, "deployment")

                await page.get_by_role("link", name=run_id).click()
                dispatches = page.locator("table.dispatches")
                await expect(dispatches).to_contain_text("hello", timeout=WAIT)
                await expect(page.locator("#live")).to_have_text("live", timeout=WAIT)
                await page.evaluate("window.notReloaded = true")

                # New mail shows up on the open page, and so does the
                # approval its handler asks for; both as text, escaped.
                await up.send(dep["address"], "gate <b>&")
                await expect(dispatches.locator("tr", has_text="gate <b>&")).to_have_count(
                    1, timeout=WAIT
                )
                approve = page.get_by_role("button", name="Approve")
                await expect(approve).to_be_visible(timeout=WAIT)
                await expect(page.locator("table.approvals")).to_contain_text("ship <it>?")
                await expect(page.locator("dd.status")).to_have_text("waiting")
                await _shot(page, "run-waiting")

                await approve.click()
                approval_id = (await up.run(run_id))["state"]["approval"]

                async def decided() -> dict[str, Any] | None:
                    a = (await up.http.get(f"/approvals/{approval_id}")).json()
                    return a if a["status"] == "decided" else None

                assert (await wait_for(decided, what="the approval decided"))["decision"] == (
                    "approve"
                )
                approvals = page.locator("table.approvals")
                await expect(approvals.locator("tr", has_text=approval_id)).to_contain_text(
                    "approve", timeout=WAIT
                )
                await expect(page.get_by_role("button", name="Approve")).to_have_count(0)
                await expect(dispatches.locator("tr", has_text="approval")).to_have_count(
                    1, timeout=WAIT
                )
                await expect(page.locator("dd.status")).to_have_text("running", timeout=WAIT)
                await _shot(page, "run-decided")
                assert await page.evaluate("window.notReloaded") is True
                assert await page.locator("#notice").is_hidden()
            finally:
                await browser.close()
        assert errors == []
