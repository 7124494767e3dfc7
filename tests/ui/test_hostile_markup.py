"""Markup written by models into every field of a run (reasons, rationales, diagnoses, transcripts, errors,
task ids, roles, the run's own name) never runs: not in the app (Debian's headless Chromium over the served
app) and not in report.html opened from disk, whose own Content-Security-Policy forbids any script even if
markup slipped through the escaping."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from recreate.optimizer.report import write_report
from recreate.runs import EvolveResult
from tests.ui.conftest import XSS, UiHome, serving

HOSTILE_RUN = "evolve-\"'><img src=x onerror=alert(1)>"
SLIPPED = '<script>window.__xss = 3; alert("slipped")</script><img src="x" onerror="window.__xss = 4">'


def _hostile(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` (a result.json) with markup in every field a model or an import can write."""
    doc = json.loads(json.dumps(doc))
    for entry in doc["history"]:
        entry["reason"], entry["errors"] = XSS, [XSS]
        for op in entry.get("ops") or []:
            op |= {"rationale": XSS, "text": XSS, "evidence": [XSS, *op.get("evidence", [])]}
    for row in doc["results"]:
        row |= {"task_id": XSS, "error": XSS, "diagnosis": XSS, "cause": XSS}
    for proposal in doc.get("proposals") or []:
        proposal |= {"diagnosis": XSS, "errors": [XSS], "source": XSS, "status": XSS}
        for message in proposal.get("transcript") or []:
            message |= {"role": XSS, "content": XSS, "tool_calls": [{"name": XSS, "args": {"x": XSS}}]}
    role = {"calls": 1, "prompt_tokens": 2, "completion_tokens": 3, "cost_usd": 0.5}
    doc["usage"] = {XSS: role} | doc.get("usage", {})
    return doc | {"stopped": XSS, "run_id": HOSTILE_RUN}


def _report(ui_home: UiHome, out: Path) -> Path:
    run_dir = ui_home.path / "runs" / ui_home.run_id
    doc = _hostile(json.loads((run_dir / "result.json").read_text()))
    return write_report(EvolveResult(**(doc | {"run_dir": run_dir})), out)


def test_the_report_carries_a_policy_that_allows_no_script(ui_home: UiHome, tmp_path: Path) -> None:
    report = _report(ui_home, tmp_path).read_text()
    head = report.split("</head>", 1)[0]
    assert '<meta http-equiv="Content-Security-Policy" content="default-src \'none\';' in head
    assert "script-src" not in head and "<script" not in report
    assert "<script>window.__xss" not in report and "&lt;script&gt;window.__xss = 1;" in report


@pytest.fixture(scope="module")
def hostile_home(ui_home: UiHome, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture home with its run renamed to markup and markup in its result and config."""
    home = tmp_path_factory.mktemp("markup") / "home"
    shutil.copytree(ui_home.path, home)
    run = home / "runs" / HOSTILE_RUN
    (home / "runs" / ui_home.run_id).rename(run)
    (run / "result.json").write_text(json.dumps(_hostile(json.loads((run / "result.json").read_text()))))
    config = json.loads((run / "config.json").read_text())
    config |= {"domain": XSS, "agent_model": XSS, "optimizer_model": XSS}
    (run / "config.json").write_text(json.dumps(config))
    return home


CHROMIUM = (
    os.environ.get("RECREATE_UI_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="the ui extra's test browser driver")
    if CHROMIUM is None:
        pytest.skip("no chromium (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def _visit(browser: Any, url: str) -> list[str]:
    """What running `url` did that script injected into it could do: dialogs, errors, window.__xss."""
    tab = browser.new_page()
    events: list[str] = []
    tab.on("dialog", lambda d: (events.append(f"dialog: {d.message}"), d.dismiss()))
    tab.on("pageerror", lambda e: events.append(f"pageerror: {e}"))
    tab.goto(url)
    tab.wait_for_load_state("load")
    if tab.evaluate("window.__xss") is not None:
        events.append(f"window.__xss = {tab.evaluate('window.__xss')}")
    if tab.locator("a[href^='javascript:'], img[onerror], script:not([src])").count():
        events.append("live markup in the page")
    tab.close()
    return events


def test_markup_in_a_report_opened_from_disk_never_runs(browser, ui_home: UiHome, tmp_path: Path) -> None:
    report = _report(ui_home, tmp_path)
    assert not _visit(browser, report.as_uri())
    slipped = tmp_path / "slipped.html"  # as if an escaping bug let markup through
    slipped.write_text(report.read_text().replace("<main>", f"<main>{SLIPPED}", 1))
    assert not [e for e in _visit(browser, slipped.as_uri()) if e != "live markup in the page"]


def test_markup_in_a_run_never_runs_in_the_app(browser, hostile_home: Path) -> None:
    run = quote(HOSTILE_RUN, safe="")
    with serving(hostile_home) as url:
        for path in ("/", f"/runs/{run}", "/runs/" + run + "?round=1", f"/versions/minimal@v2?run={run}",
                     "/versions/minimal@v3", "/experience"):  # fmt: skip
            assert not _visit(browser, url + path), path
