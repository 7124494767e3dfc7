"""The UI over a real home, e.g. that of a finished main job (`recreate evolve --model local
--finetune-every K`): RECREATE_UI_REAL_HOME=DIR runs these (read-only; skipped without it). With
RECREATE_UI_SCREENSHOTS=DIR every page is saved as DIR/<page>.png (how docs/ui/ is made)."""

from __future__ import annotations

import html
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from recreate.ui import create_app
from recreate.ui.runs import evolve_runs
from tests.ui.test_run_page import crawl

HOME = os.environ.get("RECREATE_UI_REAL_HOME")
pytestmark = pytest.mark.skipif(not HOME, reason="RECREATE_UI_REAL_HOME names no home")


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Path(HOME or "."), embedding="hash"), base_url="http://127.0.0.1:8765") as c:
        yield c


def _runs() -> list[tuple[str, dict]]:
    return [(d.name, json.loads((d / "result.json").read_text())) for d in evolve_runs(Path(HOME or "."))
            if (d / "result.json").is_file()]  # fmt: skip


def test_each_model_version_and_its_gate_is_on_the_run_page(client: TestClient) -> None:
    for run_id, result in _runs():
        page = html.unescape(client.get(f"/runs/{run_id}").text)
        for step in result.get("models") or []:
            if step.get("model"):
                assert step["model"] in page, (run_id, step["model"])
                gate = step["gate"]
                assert f"[{gate['low']:+.3f}, {gate['high']:+.3f}]" in page
        if result.get("test"):
            assert f"{result['test']['final']['mean']:.3f}" in page


def test_the_training_page_lists_every_fine_tuning_step(client: TestClient) -> None:
    page = client.get("/training").text
    for run_id, _ in _runs():
        for metrics in (Path(HOME or ".") / "runs" / run_id / "finetune").glob("round-*/train/metrics.jsonl"):
            assert f'href="/training/runs/{run_id}/finetune/{metrics.parent.parent.name}/train"' in page


def test_every_link_resolves(client: TestClient) -> None:
    seen, broken = crawl(client, limit=300)
    assert not broken, broken


def test_pages_in_a_browser(tmp_path: Path) -> None:
    """Each page in Debian's Chromium without a JavaScript error; saved for docs/ui/ when asked."""
    from tests.ui.conftest import serving
    from tests.ui.test_browser import CHROMIUM, sync_api

    if CHROMIUM is None:
        pytest.skip("no chromium")
    shots = os.environ.get("RECREATE_UI_SCREENSHOTS")
    run_id, result = _runs()[-1]
    tuned = next((m for m in result.get("models") or [] if m.get("model")), None)
    home = serving(Path(HOME or "."))
    with client_pages(run_id, result, tuned) as pages, home as url, sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1360, "height": 900}, base_url=url)
        errors: list[str] = []
        tab.on("pageerror", lambda e: errors.append(str(e)))
        for name, path in pages:
            assert tab.goto(path).status == 200, path
            if shots:
                Path(shots).mkdir(parents=True, exist_ok=True)
                tab.screenshot(path=str(Path(shots) / f"{name}.png"), full_page=True)
        browser.close()
    assert not errors, errors


def client_pages(run_id: str, result: dict, tuned: dict | None) -> Iterator[list[tuple[str, str]]]:
    import contextlib
    import sqlite3

    @contextlib.contextmanager
    def pages() -> Iterator[list[tuple[str, str]]]:
        catalog = Path(HOME or ".") / "experience" / "catalog.sqlite"
        with contextlib.closing(sqlite3.connect(f"file:{catalog}?mode=ro", uri=True)) as db:
            rows = (
                db.execute(
                    "SELECT id, task_id FROM trajectories WHERE run_id = ? AND model = ? LIMIT 1",
                    (run_id, (tuned or {}).get("model") or ""),
                ).fetchall()
                or db.execute("SELECT id, task_id FROM trajectories LIMIT 1").fetchall()
            )
            tid, task = rows[0]
            other = db.execute(
                "SELECT id FROM trajectories WHERE task_id = ? AND id != ? LIMIT 1", (task, tid)
            ).fetchone()
        accepted = [h["ref"] for h in result["history"] if h.get("ref")][-1]
        out = [("runs", "/"), ("run", f"/runs/{run_id}"), ("version", f"/versions/{accepted}?run={run_id}"),
               ("trajectory", f"/trajectories/{tid}"),
               ("experience", f"/experience?q=wrong+answer&run_id={run_id}"),
               ("training", "/training")]  # fmt: skip
        if other:
            out.append(("compare", f"/compare?a={tid}&b={other[0]}"))
        if tuned:
            out.append(("training_run", f"/training/runs/{run_id}/finetune/round-{tuned['round']:03d}/train"))
        yield out

    return pages()
