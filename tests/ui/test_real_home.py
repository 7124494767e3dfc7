"""The UI over the home of a real main-job run: by default the session's short one (tests/main_job.py:
the embedded model, one fine-tuning step and its gate; the run tests/finetune/test_evolve_step.py checks),
or RECREATE_UI_REAL_HOME=DIR (e.g. a finished `recreate evolve --model local --finetune-every K` home;
read-only). With RECREATE_UI_SCREENSHOTS=DIR every page is saved as DIR/<page>.png (how docs/ui/ is
made)."""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from recreate.experience.schema import load_trajectory
from recreate.ui import create_app
from recreate.ui.runs import evolve_runs
from tests.main_job import MainJobRun
from tests.ui.test_run_page import _table, assert_report_matches_run_page, crawl

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # the first test waits for the run


OVERRIDE = os.environ.get("RECREATE_UI_REAL_HOME")
if OVERRIDE:  # defined either way at import, so the suite sees which tests need the main job (xdist groups)

    @pytest.fixture(scope="module")
    def home() -> Path:
        return Path(OVERRIDE or ".")

else:

    @pytest.fixture(scope="module")
    def home(main_job_run: MainJobRun) -> Path:
        return main_job_run.home


@pytest.fixture(scope="module")
def client(home: Path) -> Iterator[TestClient]:
    with TestClient(create_app(home, embedding="hash"), base_url="http://127.0.0.1:8765") as c:
        yield c


def _runs(home: Path) -> list[tuple[str, dict]]:
    return [(d.name, json.loads((d / "result.json").read_text())) for d in evolve_runs(home)
            if (d / "result.json").is_file()]  # fmt: skip


def test_each_model_version_and_its_gate_is_on_the_run_page(client: TestClient, home: Path) -> None:
    runs = _runs(home)
    assert any(result.get("models") for _, result in runs), "no run of this home fine-tuned"
    for run_id, result in runs:
        page = html.unescape(client.get(f"/runs/{run_id}").text)
        rows = _table(page, "model-gates").split("<tr")[2:]  # after the header row
        assert len(rows) == len(result.get("models") or []), run_id
        for step, row in zip(result.get("models") or [], rows, strict=True):
            assert step["parent"] in row and ("accepted" if step["accepted"] else "rejected") in row
            if step.get("model"):  # a candidate was trained and gated (none when nothing was learnable)
                gate = step["gate"]
                assert step["model"] in row and f"[{gate['low']:+.3f}, {gate['high']:+.3f}]" in row
                assert (
                    f"{gate['n']} ({gate['tasks']} tasks)" in row
                    and f"{gate['wins']} / {gate['losses']}" in row
                )
                train = f"/training/runs/{run_id}/finetune/round-{step['round']:03d}/train"
                assert f'href="{train}"' in row and "loss " in row
                grid = _table(page, "pair-grid")
                assert (
                    step["model"] in grid
                    and step["parent"] in grid
                    and f"model gate, round {step['round']}" in grid
                )
        assert str(result.get("final_model") or "") in _table(page, "final-model")
        if result.get("test"):
            assert f"{result['test']['final']['mean']:.3f}" in page


def test_the_training_page_lists_every_fine_tuning_step(client: TestClient, home: Path) -> None:
    trained = [
        (run_id, m) for run_id, result in _runs(home) for m in result.get("models") or [] if m.get("train")
    ]
    if not trained:  # seeded sampling makes the short run's outcome repeatable; its last runs trained
        pytest.skip("no fine-tuning step trained: every group of sampled runs had equal rewards")
    page, runs = client.get("/training").text, client.get("/").text
    for run_id, step in trained:
        train = (home / "runs" / run_id / "finetune" / f"round-{step['round']:03d}" / "train").relative_to(
            home
        )
        assert f'href="/training/{train.as_posix()}"' in page and train.as_posix() in runs
        charts = client.get(f"/training/{train.as_posix()}").text
        captions = re.findall(r"<figcaption>([^<]*)</figcaption>", charts)
        for panel in (
            "loss",
            "reward",
            "KL",
            "clip fractions",
            "clip fraction by position bin",
            "ratio quantiles",
        ):
            assert panel in captions, captions
        assert charts.count('<img class="chart"') >= 6 and "data:image/svg+xml;base64," in charts


def test_report_html_shows_the_numbers_of_the_run_page(
    client: TestClient, home: Path, tmp_path: Path
) -> None:
    for run_id, _ in _runs(home):
        assert_report_matches_run_page(client, home, run_id, tmp_path / run_id)


def test_every_link_resolves(client: TestClient) -> None:
    seen, broken = crawl(client, limit=300)
    assert not broken, broken


def _sampled(home: Path, limit: int = 3) -> list[tuple[str, str]]:
    """(trajectory id, what the model answered) of trajectories with token log-probabilities: one per
    model version that sampled some."""
    catalog = home / "experience" / "catalog.sqlite"
    with contextlib.closing(sqlite3.connect(f"file:{catalog}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT id, model, path FROM trajectories ORDER BY rowid DESC").fetchall()
    out, models = [], set()
    for tid, model, path in rows:
        if model in models:
            continue
        traj = load_trajectory(home / "experience" / path)
        step = next(
            (s for s in traj.steps if s.logprobs and s.token_ids and s.message_index is not None), None
        )
        if step is not None:
            models.add(model)
            out.append((tid, str(traj.messages[step.message_index]["content"])))
    return out[:limit]


def test_the_heat_map_shows_the_text_of_the_sampled_tokens(client: TestClient, home: Path) -> None:
    """With the model's own tokenizer (SmolLM2's, found from the run): each cell is one token's text,
    and the cells of the first step read as what the model answered."""
    sampled = _sampled(home)
    assert sampled, "no trajectory with token log-probabilities in this home"
    for tid, answer in sampled:
        page = client.get(f"/trajectories/{tid}").text
        assert "token text unavailable" not in page, tid
        heat = page[page.index('<div class="tokens">') :].split("</div>")[0]
        cells = re.findall(
            r'<span class="tok p\d" title="[^"]*">(.*?)</span>(?=<br>|<span class="tok|$)', heat
        )
        text = "".join(html.unescape(re.sub(r"<[^>]+>", "", c)) for c in cells).replace("…", "")
        assert text.startswith(answer.replace(" ", "·").replace("\n", "↵").replace("\t", "→")), (tid, text)


def test_pages_in_a_browser(home: Path) -> None:
    """Each page in Debian's Chromium without a JavaScript error; saved for docs/ui/ when asked."""
    from tests.ui.conftest import serving
    from tests.ui.test_browser import CHROMIUM, sync_api

    if CHROMIUM is None:
        pytest.skip("no chromium")
    shots = os.environ.get("RECREATE_UI_SCREENSHOTS")
    run_id, result = _runs(home)[-1]
    tuned = next((m for m in result.get("models") or [] if m.get("model")), None)
    served = serving(home)
    with served as url, sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1360, "height": 900}, base_url=url)
        errors: list[str] = []
        tab.on("pageerror", lambda e: errors.append(str(e)))
        for name, path in _pages(home, run_id, result, tuned):
            assert tab.goto(path).status == 200, path
            if shots:
                Path(shots).mkdir(parents=True, exist_ok=True)
                tab.screenshot(path=str(Path(shots) / f"{name}.png"), full_page=True)
        browser.close()
    assert not errors, errors


def _pages(home: Path, run_id: str, result: dict, tuned: dict | None) -> list[tuple[str, str]]:
    catalog = home / "experience" / "catalog.sqlite"
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
           ("trajectory", f"/trajectories/{tid}"), ("training", "/training"),
           ("experience", f"/experience?q=wrong+answer&run_id={run_id}")]  # fmt: skip
    if other:
        out.append(("compare", f"/compare?a={tid}&b={other[0]}"))
    if tuned:
        out.append(("training_run", f"/training/runs/{run_id}/finetune/round-{tuned['round']:03d}/train"))
    return out
