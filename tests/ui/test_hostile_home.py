"""A home holding what no run of this code wrote: hand-edited or imported run files of another shape,
trajectories that do not load, names with URL characters. Each is an error for that item alone (named on
its page, or an "unreadable" row); every other page still shows. Real HTTP to the app served by uvicorn."""

from __future__ import annotations

import html
import json
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from recreate.experience.schema import Outcome, ScaffoldRef, Step, Trajectory
from recreate.experience.store import ExperienceStore
from recreate.text import clip_middle
from recreate.ui.render import CLIP_CHARS, environment
from tests.ui.conftest import UiHome, serving

GOOD = "evolve-good"
SPLIT_NUMBER = "evolve-split-number"
TRAINING = "tapo/run #1?x"  # a folder name with URL characters
CONFIG = {"seed_ref": "minimal@v1", "domain": "jsonl", "agent_model": "m", "optimizer_model": "m",
          "train": ["alpha"], "val": ["bravo"]}  # fmt: skip
ROOT = {"ref": "minimal@v1", "parent": None, "accepted": True, "round": 0, "reason": "seed",
        "val": {"bravo": 1.0}}  # fmt: skip
USAGE = {"agent": {"calls": 2, "prompt_tokens": 10, "completion_tokens": 5, "cost_usd": 0.25}}
RESULT = {"run_id": GOOD, "final": "minimal@v1", "history": [ROOT], "usage": USAGE}
# run id -> (config.json, result.json): each of another shape than a run writes
DAMAGED: dict[str, tuple[Any, Any]] = {
    "evolve-string-scores": (CONFIG, RESULT | {"history": [ROOT | {"val": {"bravo": "high"}}]}),
    "evolve-usage-text": (CONFIG, RESULT | {"usage": {"agent": {"cost_usd": "lots"}}}),
    "evolve-history-of-numbers": (CONFIG, RESULT | {"history": [1, "x", ROOT]}),
    "evolve-list-result": (CONFIG, [1, 2]),
    "evolve-config-list": (["seed_ref"], RESULT),
    SPLIT_NUMBER: (CONFIG | {"train": 5, "val": [{"task": "bravo"}]}, RESULT),
}
UNREADABLE = ("evolve-string-scores", "evolve-usage-text", "eval-odd")


@dataclass
class Served:
    home: Path
    url: str


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.status, reply.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8")


def _write(path: Path, content: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")


def _trajectory(trajectory_id: str, run_id: str) -> Trajectory:
    return Trajectory(
        trajectory_id=trajectory_id, task_id="alpha", run_id=run_id, domain="jsonl",
        scaffold=ScaffoldRef(name="minimal", version="v1"), outcome=Outcome(exit_status="submitted"),
    )  # fmt: skip


def _build(home: Path) -> None:
    for run_id, (config, result) in {GOOD: (CONFIG, RESULT), **DAMAGED}.items():
        _write(home / "runs" / run_id / "config.json", config)
        _write(home / "runs" / run_id / "result.json", result)
    _write(home / "evals" / "eval-odd" / "results.json", {"summary": [1], "run": "x", "complete": True})
    copies = home / "runs" / GOOD / "trajectories"
    _trajectory("t-good", GOOD).save(copies / "t-good.json")
    odd = _trajectory("t-logprob-over-0", GOOD)
    odd.steps = [Step(index=0, token_ids=[1, 2], logprobs=[5000.0, -0.5])]
    odd.save(copies / "t-logprob-over-0.json")
    huge = _trajectory("t-huge", GOOD)  # e.g. imported from a tracing tool: megabytes in one message
    huge.messages = [{"role": "user", "content": "x" * 3_000_000 + "TAIL-OF-MESSAGE"}]
    huge.outcome = Outcome(exit_status="submitted", submission="y" * 3_000_000 + "TAIL-OF-SUBMISSION")
    huge.steps = [Step(index=0, action={"command": "z" * 3_000_000})]
    huge.save(copies / "t-huge.json")
    _write(copies / "t-notutf8.json", b'{"trajectory_id": "\xff\xfe"}')
    _write(copies / "t-notschema.json", {"steps": 5})
    _write(home.parent / "outside.json", {"token": "hunter2-outside"})  # not the home's: never quoted
    (copies / "t-outside.json").symlink_to(home.parent / "outside.json")
    store = ExperienceStore(home / "experience", embedding="hash")
    store.add(_trajectory("t-of-split-number", SPLIT_NUMBER))
    store.close()
    _write(home / TRAINING / "metrics.jsonl", '{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.4}\n')


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("hostile") / "home"
    _build(home)
    with serving(home) as url:
        yield Served(home, url)


def _row(page: str, run_id: str) -> str:
    rows = [row for row in page.split("<tr") if f">{html.escape(run_id)}</a>" in row]
    assert len(rows) == 1, run_id
    return rows[0]


def test_a_run_of_another_shape_is_one_unreadable_row(served: Served) -> None:
    for path in ("/", "/runs-table"):
        status, page = _get(served.url + path)
        assert status == 200, page
        assert "finished" in _row(page, GOOD) and "0.2500" in _row(page, GOOD)
        for run_id in UNREADABLE:
            assert "unreadable" in _row(page, run_id) and "cannot be shown" in _row(page, run_id), run_id
        assert "failed" in _row(page, "evolve-list-result")  # no result it can read: as a killed run
        assert "evolve-config-list" not in page  # a config that is not an object is no run's
        assert str(served.home) not in page.split("</nav>", 1)[-1]


def test_a_damaged_run_page_names_what_went_wrong(served: Served) -> None:
    status, page = _get(f"{served.url}/runs/evolve-string-scores")
    assert status == 500 and "/runs/evolve-string-scores could not be shown: TypeError" in html.unescape(page)
    assert str(served.home) not in page
    for run_id in (GOOD, "evolve-history-of-numbers", "evolve-usage-text", SPLIT_NUMBER):
        status, page = _get(f"{served.url}/runs/{run_id}")
        assert status == 200, (run_id, page)
    assert "lots" in _get(f"{served.url}/runs/evolve-usage-text")[1]  # shown as it is, not formatted


def test_a_config_listing_no_task_ids_breaks_no_trajectory_list(served: Served) -> None:
    for path in ("/experience", f"/runs/{SPLIT_NUMBER}", "/trajectories/t-of-split-number"):
        status, page = _get(served.url + path)
        assert status == 200 and "t-of-split-number" in page, (path, page)


def test_a_trajectory_that_does_not_load_is_an_error_for_it_alone(served: Served) -> None:
    assert _get(f"{served.url}/trajectories/t-good")[0] == 200
    status, page = _get(f"{served.url}/trajectories/t-logprob-over-0")
    assert status == 200 and "log-prob 5000.000 · p 1.000" in page, page
    for trajectory_id, why in (("t-notutf8", "UnicodeDecodeError"), ("t-notschema", "SchemaError")):
        status, page = _get(f"{served.url}/trajectories/{trajectory_id}")
        text = html.unescape(page)
        assert status == 500 and f"trajectory '{trajectory_id}' does not load" in text and why in text, text
        assert str(served.home) not in page
    assert _get(f"{served.url}/trajectories/t-absent")[0] == 404
    status, page = _get(f"{served.url}/trajectories/t-outside")
    assert status == 500 and "a file outside the home" in page and "hunter2" not in page


def test_a_trajectory_of_megabytes_shows_each_text_clipped_and_says_how_much_more(served: Served) -> None:
    status, page = _get(f"{served.url}/trajectories/t-huge")
    assert status == 200 and len(page) < 500_000, len(page)  # was 9 MB
    assert page.count(" chars cut]…") == 3  # message, submission, action: each its head and tail
    message = clip_middle("x" * 3_000_000 + "TAIL-OF-MESSAGE", CLIP_CHARS)
    assert len(message) == CLIP_CHARS and html.escape(message, quote=False) in page


def test_a_training_run_named_with_url_characters_is_linked(served: Served) -> None:
    for listing in ("/training", "/"):
        hrefs = re.findall(r'href="(/training/[^"]+)"', _get(served.url + listing)[1])
        assert len(hrefs) == 1, hrefs
        status, page = _get(served.url + html.unescape(hrefs[0]))
        assert status == 200 and "2 logged step(s)" in page, (hrefs, page)


@pytest.fixture(scope="module")
def edited(ui_home: UiHome, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The fixture home with a run whose history holds no objects (sorted before the real run) and the
    real run's gate missing its numbers."""
    home = tmp_path_factory.mktemp("edited") / "home"
    shutil.copytree(ui_home.path, home)
    _write(home / "runs" / "0-broken" / "config.json", CONFIG)
    _write(home / "runs" / "0-broken" / "result.json", {"history": 7, "results": {"a": 1}})
    _write(home / "runs" / "0-numbers" / "config.json", CONFIG)
    _write(home / "runs" / "0-numbers" / "result.json", {"history": [1, 2]})
    result_file = home / "runs" / ui_home.run_id / "result.json"
    result = json.loads(result_file.read_text())
    for entry in result["history"]:
        if entry.get("gate"):
            entry["gate"] = entry["gate"] | {"improvement": None, "low": "n/a"}
    result_file.write_text(json.dumps(result))
    with serving(home) as url:
        yield Served(home, url)


def test_a_version_page_survives_other_runs_and_gates_without_numbers(edited: Served, ui_home) -> None:
    for path in ("/versions/minimal@v2", f"/versions/minimal@v2?run={ui_home.run_id}"):
        status, page = _get(edited.url + path)
        assert status == 200 and "Gate decision" in page, (path, page)
        assert "<td>-</td><td>[n/a," in page
    assert _get(f"{edited.url}/runs/{ui_home.run_id}")[0] == 200
    assert _get(f"{edited.url}/")[0] == 200


def test_filters_show_what_a_number_field_holds_instead_of_failing() -> None:
    filters = environment().filters
    assert [filters["when"](t) for t in (None, 1e18, float("nan"))] == ["-", "-", "-"]
    assert [filters["num"](v) for v in (None, 0.5, "high", True)] == ["-", "0.500", "high", "True"]
    assert [filters["signed"](v) for v in (None, 0.25, "n/a")] == ["-", "+0.250", "n/a"]
    assert filters["qpath"]("tapo/run #1?x") == "tapo/run%20%231%3Fx"


@pytest.mark.parametrize(
    "path",
    ["/runs/..%2F..%2Foutside", "/runs/%2e%2e", "/runs/.%2e", "/runs/%00", "/evals/%2e%2e",
     "/evals/..%2Fruns",
     "/trajectories/..%2F..%2Foutside", "/trajectories/%2e%2e%2Foutside", "/trajectories/%00",
     "/training/..%2Fmetrics-outside", "/training/%2Ftmp", "/training/tapo%2F..%2F..%2Fmetrics-outside",
     "/versions/..%2F..%40v1", "/static/..%2F..%2Fapp.py", "/static/%2e%2e/app.py",
     "/compare?a=..%2F..%2Foutside&b=t-good"],
)  # fmt: skip
def test_no_route_reads_outside_the_home(served: Served, path: str) -> None:
    _write(served.home.parent / "metrics-outside" / "metrics.jsonl", '{"step": 1, "hunter2": 1}\n')
    status, page = _get(served.url + path)
    assert status in (400, 404) and "hunter2" not in page and "def create_app" not in page, (path, status)


def test_a_search_where_nothing_is_indexed_writes_nothing(tmp_path: Path) -> None:
    """Any web page can make the browser send a GET here (an <img>): a search creates no index."""
    home = tmp_path / "home"
    store = ExperienceStore(home / "experience", embedding="hash")
    store.add(_trajectory("t-a", GOOD))
    store.close()
    shutil.rmtree(home / "experience" / "chroma")
    before = sorted(p for p in home.rglob("*") if not p.name.endswith(("-shm", "-wal")))
    with serving(home) as url:
        status, page = _get(f"{url}/experience?q=hello")
    assert status == 200 and "no hits" in page
    assert sorted(p for p in home.rglob("*") if not p.name.endswith(("-shm", "-wal"))) == before
