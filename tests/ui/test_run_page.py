"""The run page tells both halves of the story (scaffold versions, model versions, their gates, the
pairs), report.html shows the same numbers, every link of the app resolves, and what each trajectory
was (split, model version, reward, token log-probabilities) is on its page."""

from __future__ import annotations

import html
import json
import re
from collections import deque
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from starlette.testclient import TestClient

from recreate.optimizer.optimizer import EvolveResult
from recreate.optimizer.report import write_report
from recreate.ui import create_app
from tests.ui.conftest import DIR_ID, EVAL_ID, XSS_ID, UiHome

MAX_PAGES = 800
COMPARED = (
    "best-score",
    "final-scaffold",
    "final-model",
    "scaffold-gates",
    "model-gates",
    "pair-grid",
    "usage",
)


@pytest.fixture(scope="module")
def client(ui_home: UiHome) -> Iterator[TestClient]:
    app = create_app(ui_home.path, embedding="hash")
    with TestClient(app, base_url="http://127.0.0.1:8765") as client:  # its lifespan closes the store
        yield client


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and (tag, name) in {
                ("a", "href"),
                ("link", "href"),
                ("script", "src"),
            }:
                self.links.append(value)


def crawl(client: TestClient, limit: int = MAX_PAGES) -> tuple[set[str], list[tuple[str, int]]]:
    """From the runs page, every link to this server followed once (up to `limit` pages): (the pages
    seen, those that did not answer 200)."""
    seen, queue, broken = {"/"}, deque(["/"]), []
    while queue:
        url = queue.popleft()
        reply = client.get(url)
        if reply.status_code != 200:
            broken.append((url, reply.status_code))
            continue
        if "text/html" not in reply.headers.get("content-type", ""):
            continue
        parser = _Links()
        parser.feed(reply.text)
        for link in parser.links:
            target = urlsplit(urljoin(f"http://127.0.0.1:8765{url}", link))
            if target.netloc != "127.0.0.1:8765" or target.scheme not in ("http", ""):
                continue
            path = target.path + (f"?{target.query}" if target.query else "")
            if path not in seen and len(seen) < limit:
                seen.add(path)
                queue.append(path)
    return seen, broken


def test_every_link_resolves(client: TestClient) -> None:
    seen, broken = crawl(client)
    assert not broken, broken
    assert len(seen) > 30


def test_the_run_page_lists_every_scaffold_version_with_its_gate(client, ui_home) -> None:
    """(Model versions and the scaffold x model grid: tests/ui/test_real_home.py, over a real run.)"""
    gates = _text(_table(html.unescape(client.get(f"/runs/{ui_home.run_id}").text), "scaffold-gates"))
    assert "minimal@v2" in gates and "minimal@v3" in gates  # the rejected scaffold candidate too
    assert (
        "minimal@v1 scripted@http://127.0.0.1/v1 accepted 1.000 0.000 +1.000 [+1.000, +1.000] 75% CI 3"
        in gates
    )
    assert "rejected 0.000 1.000 -1.000 [-1.000, -1.000] 75% CI 3 (3 tasks) 0 / 3" in gates


def test_the_runs_list_shows_the_best_kept_pair(client: TestClient, ui_home: UiHome) -> None:
    runs = html.unescape(client.get("/").text)
    row = runs[runs.index('<tr class="run evolve">') :].split("</tr>")[0]
    assert "1.000" in row and "minimal@v2 ×" in row  # v2 scored 1.000 at its gate (the words domain)


def test_report_html_shows_the_numbers_of_the_run_page(client: TestClient, ui_home: UiHome, tmp_path) -> None:
    assert_report_matches_run_page(client, ui_home.path, ui_home.run_id, tmp_path)


def assert_report_matches_run_page(client: TestClient, home: Path, run_id: str, out: Path) -> None:
    """report.html has the run page's tables, each with the same text (a link on the page is its text
    in the report) and numbers in it."""
    run_dir = home / "runs" / run_id
    doc = json.loads((run_dir / "result.json").read_text())
    result = EvolveResult(**(doc | {"run_dir": run_dir}))
    report = write_report(result, out / "report").read_text()
    page = client.get(f"/runs/{run_id}").text
    for name in COMPARED:
        assert (f'id="{name}"' in report) == (f'id="{name}"' in page), name
        if f'id="{name}"' in page:
            assert _text(_table(report, name)) == _text(_table(page, name)), name
            assert re.search(r"\d\.\d{3}", _text(_table(page, name))) or name.startswith("final"), name


def test_a_trajectory_says_its_split_model_version_reward_and_token_logprobs(client, ui_home) -> None:
    page = client.get(f"/trajectories/{XSS_ID}").text
    assert 'class="model">unknown<' in page and 'class="reward">0.00<' in page
    heat = re.findall(r'<span class="tok (p\d)" title="token (\d+) · log-prob (-?[\d.]+)', page)
    assert heat == [
        ("p0", "11", "-0.010"),
        ("p1", "12", "-0.300"),
        ("p3", "13", "-2.500"),
        ("p5", "14", "-7.000"),
    ]
    config = json.loads((ui_home.path / "runs" / ui_home.run_id / "config.json").read_text())
    for split in ("train", "val"):
        rows = _text(
            _table(
                client.get(f"/experience?task_id={config[split][0]}&run_id={ui_home.run_id}").text,
                "trajectories",
            )
        )
        assert f"{config[split][0]} {split} minimal@" in rows and " scripted " in rows, rows


def test_a_run_of_a_directory_scaffold_links_to_no_version(client) -> None:
    page = client.get(f"/trajectories/{DIR_ID}").text
    assert "/versions/" not in page and "from a directory" in page
    assert f'href="/evals/{EVAL_ID}"' in page and "@None" not in client.get("/experience").text


def test_semantic_search_applies_every_filter(client, ui_home) -> None:
    def hits(query: str) -> set[str]:
        reply = client.get(f"/experience?q=word&k=50&{query}")
        assert reply.status_code == 200, reply.text
        return set(re.findall(r'href="/trajectories/([^"#]+)"', reply.text))

    everything = hits("")
    assert len(everything) > 3
    assert hits(f"run_id={EVAL_ID}") == hits(f"run_id={EVAL_ID}") and hits(f"run_id={EVAL_ID}") < everything
    assert not hits("run_id=no-such-run") and not hits("scaffold_version=v99") and not hits("model=nope")
    assert hits("scaffold_version=v3") and hits("scaffold_version=v3") < everything
    reply = client.get("/experience?q=word&scope=memory&run_id=x")
    assert reply.status_code == 400 and "cannot filter by run_id" in html.unescape(reply.text)


def _table(page: str, element_id: str) -> str:
    """The element with that id: a table, or a <b>."""
    start = page.index(f'id="{element_id}"')
    tag = page[page.rindex("<", 0, start) + 1 : start].split()[0]
    return page[start : page.index(f"</{tag}>", start)]


def _text(element: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", element)).split())


def test_static_export_needs_no_server(tmp_path: Path, ui_home: UiHome) -> None:
    run_dir = ui_home.path / "runs" / ui_home.run_id
    doc = json.loads((run_dir / "result.json").read_text())
    report = write_report(EvolveResult(**(doc | {"run_dir": run_dir})), tmp_path).read_text()
    assert 'href="/' not in report and "<script" not in report and "<style>" in report
    assert "the meta-agent's messages" in report  # reflections with their transcripts


def test_a_gate_stored_before_levels_were_kept_shows_the_default_interval() -> None:
    from recreate.ui.render import environment

    cell = environment().from_string("{% from '_gate.html' import gate_cells %}{{ gate_cells(g) }}")
    old = {"improvement": 0.5, "low": 0.1, "high": 0.9, "n": 6, "tasks": 6, "wins": 5, "losses": 0}
    assert "[+0.100, +0.900] 95% CI" in cell.render(g=old)
    assert "97.5% CI" in cell.render(g=old | {"alpha": 0.0125})
    assert "95% CI" in cell.render(g=old | {"alpha": "junk"})  # a damaged file: the default, not a 500
