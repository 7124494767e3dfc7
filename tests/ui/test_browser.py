"""The pages in a real browser: Debian's headless Chromium driven by Playwright against the app served
on a port. Every page fails the test on a JavaScript dialog or error. With RECREATE_UI_SCREENSHOTS=DIR
each page is also saved as DIR/<page>.png (how docs/ui/ is made)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ui.conftest import XSS_ID, UiHome

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the ui extra's test browser driver (playwright)"
)
CHROMIUM = (
    os.environ.get("RECREATE_UI_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium)")
SHOTS = os.environ.get("RECREATE_UI_SCREENSHOTS")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, ui_url) -> Iterator[object]:
    """A page that records every dialog, JavaScript error and console message."""
    context = browser.new_context(viewport={"width": 1360, "height": 900}, base_url=ui_url)
    context.set_default_timeout(10_000)
    tab = context.new_page()
    tab.events = []  # type: ignore[attr-defined]
    tab.on("dialog", lambda d: (tab.events.append(f"dialog: {d.message}"), d.dismiss()))
    tab.on("pageerror", lambda e: tab.events.append(f"pageerror: {e}"))
    tab.on("console", lambda m: tab.events.append(f"console {m.type}: {m.text}"))
    yield tab
    assert not [e for e in tab.events if not e.startswith("console")], tab.events
    context.close()


def shot(page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


def test_runs_page_lists_the_run_with_status_spend_and_best_score(page, ui_home: UiHome):
    page.goto("/")
    row = page.locator("tr.run.evolve", has_text=ui_home.run_id)
    assert "finished" in row.inner_text() and "1.000" in row.inner_text()
    assert all(role in row.inner_text() for role in ("agent", "optimizer", "synthesis"))
    shot(page, "runs")


def test_from_a_rejected_version_to_its_evidence(page, ui_home: UiHome):
    page.goto(f"/runs/{ui_home.run_id}")
    tree = page.locator("ul.tree")
    assert (
        tree.locator("li.version.accepted").count() == 2 and tree.locator("li.version.rejected").count() == 1
    )
    assert "75% CI [-1.000, -1.000], n=3" in tree.locator("li.version.rejected").inner_text()
    assert page.locator("img.chart").count() == 2  # scores per round, spend per role
    assert "rejected as minimal@v3" in page.locator("tr.round").last.inner_text()
    assert page.locator("table.proposals tr").count() == 4  # the last round's three, by default
    shot(page, "run")
    page.locator("tr.round a", has_text="round 1").click()
    assert "accepted as minimal@v2" in page.locator("h3#proposals").inner_text()

    tree.locator("li.version.rejected > a").click()
    page.wait_for_url("**/versions/minimal@v3*")
    assert "rejected" in page.locator("h1").inner_text()
    assert "Answer in UPPERCASE." in page.locator("div.change.added").inner_text()
    assert "lowercase" in page.locator("details.tool summary").inner_text()  # the scaffold's tools, with code
    evidence = page.locator("ul.evidence a.evidence")
    assert evidence.count() == 3  # the training runs the round's synthesis drew on
    shot(page, "version")

    cited = evidence.first.inner_text()
    evidence.first.click()
    page.wait_for_url(f"**/trajectories/{cited}")
    assert cited in page.locator("h1").inner_text()
    assert page.locator("div.step").count() >= 1 and page.locator("div.message").count() >= 2
    assert "case of the answer" in page.locator("div.proposal").inner_text()  # the reflection on it
    shot(page, "trajectory")


def test_side_by_side_compare_of_two_runs_of_a_task(page):
    page.goto("/experience?task_id=bravo")  # a validation task: every version ran it
    page.locator("table.trajectories a").first.click()
    options = page.locator("form.compare option").all_inner_texts()
    assert len(options) >= 2 and any("minimal@v2" in o for o in options)
    page.locator("form.compare button").click()
    page.wait_for_url("**/compare?*")
    columns = page.locator(".side-by-side > div")
    assert columns.count() == 2
    assert all(columns.nth(i).locator("div.trajectory").count() == 1 for i in range(2))
    shot(page, "compare")


def test_experience_search_with_filters(page):
    page.goto("/experience")
    assert page.locator("table.trajectories tr").count() > 10
    page.fill("input[name=q]", "lowercase word")
    page.fill("input[name=outcome]", "failed")
    page.click("form.search button")
    page.wait_for_url("**/experience?*")
    hits = page.locator("table.hits tr")
    assert hits.count() > 1 and "no hits" not in hits.nth(1).inner_text()
    shot(page, "experience")


def test_markup_in_a_trajectory_never_executes(page, ui_home: UiHome):
    for url in (f"/trajectories/{XSS_ID}", f"/runs/{ui_home.run_id}", "/experience", "/experience?q=script"):
        page.goto(url)
        page.wait_for_load_state("load")
        assert page.evaluate("window.__xss") is None, url
        assert page.locator("a[href^='javascript:'], img[onerror], script:not([src])").count() == 0, url
    page.goto(f"/trajectories/{XSS_ID}")
    assert "<script>window.__xss = 1;" in page.locator("pre.submission").inner_text()  # shown as text
    page.locator("pre.stdout").scroll_into_view_if_needed()
    assert page.locator("p.truncated").first.inner_text() == "[stdout truncated]"


def test_the_runs_table_follows_a_run_in_progress(browser, ui_home: UiHome, tmp_path):
    """A run without its result, still writing its ledger, shows as running; when it writes its
    result, the open page turns it to finished by itself (no reload)."""
    from tests.ui.conftest import serving

    home = tmp_path / "home"
    run = home / "runs" / ui_home.run_id
    shutil.copytree(ui_home.path / "runs" / ui_home.run_id, run)
    result = (run / "result.json").read_bytes()
    (run / "result.json").unlink()
    (run / "ledger.jsonl").touch()
    with serving(home) as url:
        tab = browser.new_page(base_url=url)
        tab.goto("/")
        row = tab.locator("tr.run.evolve")
        assert "running" in row.inner_text()
        tab.goto(f"/runs/{ui_home.run_id}")  # the lineage so far, from the run's checkpoints
        assert tab.locator("ul.tree li.version").count() == 3
        tab.goto("/")
        (run / "result.json").write_bytes(result)
        tab.locator("tr.run.evolve", has_text="finished").wait_for(timeout=10_000)
        assert tab.url.endswith("/")  # updated in place
        tab.close()
