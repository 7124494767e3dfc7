"""The app over the fixture home without a browser: read-only, GET only, escaped, paginated, statuses."""

from __future__ import annotations

import gc
import html
import os
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from recreate.ui import create_app
from recreate.ui.runs import EvolveRun, status_of
from recreate.ui.trajectories import TrajectoryReader
from tests.ui.conftest import EVAL_ID, XSS, XSS_ID, UiHome

PAGES = ["/", "/runs-table", "/experience", "/experience?outcome=failed", "/training"]


def _pages(home: UiHome) -> list[str]:
    run = f"/runs/{home.run_id}"
    return [
        *PAGES,
        run,
        f"{run}?offset=5",
        f"/versions/minimal@v3?run={home.run_id}",
        "/versions/minimal@v1",
        f"/trajectories/{XSS_ID}",
        f"/evals/{EVAL_ID}",
    ]


@pytest.fixture(scope="module")
def client(ui_home: UiHome) -> TestClient:
    return TestClient(create_app(ui_home.path, embedding="hash"), base_url="http://127.0.0.1:8765")


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith("-shm"):  # SQLite's shared-memory index: every WAL reader updates it
                continue
            stat = os.stat(os.path.join(folder, name))
            if name.endswith("-wal") and not stat.st_size:  # a reader's, after the writer closed its WAL
                continue
            out[os.path.join(folder, name)] = (stat.st_size, stat.st_mtime_ns)
    return out


def test_every_page_renders_and_leaves_the_home_untouched(client, ui_home):
    before = _snapshot(ui_home.path)
    for url in _pages(ui_home):
        reply = client.get(url)
        assert reply.status_code == 200, url
        assert "default-src 'self'" in reply.headers["content-security-policy"]
    assert _snapshot(ui_home.path) == before


def test_no_endpoint_writes(client, ui_home):
    for url in _pages(ui_home):
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            assert client.request(method, url).status_code == 405, (method, url)


def test_model_output_is_escaped(client):
    page = client.get(f"/trajectories/{XSS_ID}").text
    assert "<script>window.__xss" not in page and 'onerror="' not in page and 'href="javascript:' not in page
    assert "&lt;script&gt;window.__xss = 1;" in page
    assert page.count("&lt;img src=") >= 6  # messages, action, stdout, stderr, submission, feedback


def test_unknown_things_are_a_404_that_says_what_is_missing(client, ui_home):
    homes = {str(ui_home.path), str(ui_home.path.resolve())}
    for url, missing in (
        ("/runs/evolve-nope", "no evolve run 'evolve-nope'"),
        ("/trajectories/t-nope", "no trajectory 't-nope'"),
        ("/versions/minimal@v99", "no scaffold version 'minimal@v99'"),
        ("/training/tapo/nope", "no training run 'tapo/nope'"),
        ("/evals/nope", "no eval run 'nope'"),
        ("/runs/..%2Fscaffolds", "Not Found"),  # never a path outside runs/
    ):
        reply = client.get(url)
        assert reply.status_code == 404 and missing in html.unescape(reply.text), url
        assert not any(home in html.unescape(reply.text) for home in homes), url  # no absolute home path
    reply = client.get("/experience?offset=many")
    assert reply.status_code == 400 and "offset must be a whole number" in reply.text
    assert "scope must be one of" in client.get("/experience?q=x&scope=everything").text


def test_catalog_pages_are_slices_newest_first(ui_home):
    reader = TrajectoryReader(ui_home.path)
    first = reader.page({"run_id": ui_home.run_id}, 0, size=5)
    assert first.total == 19 and len(first.entries) == 5  # 18 evolve rollouts + the injected one
    assert first.entries[0].id == XSS_ID and first.next_offset == 5 and first.prev_offset is None
    last = reader.page({"run_id": ui_home.run_id}, 15, size=5)
    assert len(last.entries) == 4 and last.next_offset is None and last.prev_offset == 10
    seen = {e.id for off in range(0, 20, 5) for e in reader.page({"run_id": ui_home.run_id}, off, 5).entries}
    assert len(seen) == 19


def test_catalog_reads_close_their_connections(ui_home):
    reader = TrajectoryReader(ui_home.path)
    gc.collect()
    gc.disable()  # a connection left open stays so until the collector frees its reference cycle
    try:
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(50):  # as many page views of a long-running `recreate ui`
            assert reader.page({}).entries and reader.entry(XSS_ID)
        assert len(os.listdir("/proc/self/fd")) <= before + 2
    finally:
        gc.enable()


def test_run_status_is_read_from_what_the_run_left(tmp_path, ui_home):
    now = time.time()
    assert status_of(True, False, now) == "finished"
    assert status_of(True, True, now) == "stopped at budget"
    assert status_of(False, False, now - 5, now) == "running"
    assert status_of(False, False, now - 3600, now) == "failed"
    # a run without result.json still writing its ledger: running, with its versions read from the checkpoints
    live = tmp_path / "runs" / ui_home.run_id
    shutil.copytree(ui_home.path / "runs" / ui_home.run_id, live)
    (live / "result.json").unlink()
    (live / "ledger.jsonl").touch()
    run = EvolveRun.open(live)
    assert run.status == "running"
    assert [h["ref"] for h in run.history] == ["minimal@v1", "minimal@v2", "minimal@v3"]
    assert set(run.spend()) == {"agent", "optimizer", "synthesis"}
    old = now - 3600
    for name in ("ledger.jsonl", "spent.json", "checkpoints.sqlite"):
        os.utime(live / name, (old, old))
    for left in live.glob("checkpoints.sqlite-*"):  # a live writer has these; a killed one may not
        left.unlink()
    failed = EvolveRun.open(live)
    assert failed.status == "failed" and len(failed.history) == 3
    assert not list(live.glob("checkpoints.sqlite-*"))  # an idle run's checkpoints are opened immutable


def test_runs_page_lists_the_evolve_run(client, ui_home):
    page = client.get("/").text
    assert ui_home.run_id in page and "finished" in page and "1.000" in page
    assert XSS not in page


def test_eval_runs_show_their_rollouts(client, ui_home):
    page = html.unescape(client.get(f"/evals/{EVAL_ID}").text)
    assert "jsonl/val" in page and page.count('href="/trajectories/') == 3 and page.count(">passed<") == 3
    assert f'href="/evals/{EVAL_ID}"' in client.get("/").text
    rollout = page.split('href="/trajectories/')[1].split('"')[0]
    assert client.get(f"/trajectories/{rollout}").status_code == 200  # from the eval's own folder


def test_a_version_page_finds_its_run_and_lists_filter_by_error_type(client, ui_home):
    page = client.get("/versions/minimal@v3").text  # no ?run=: the run that judged it is found
    assert "Gate decision" in page and ui_home.run_id in page
    reader = TrajectoryReader(ui_home.path)
    assert reader.page({"error_type": "no-such-error"}).total == 0
    steps = _steps(ui_home.path)
    for kind in {k for _, k in steps}:
        found = {e.id for e in reader.page({"error_type": kind}, size=100).entries}
        assert found == {t for t, k in steps if k == kind}, kind


def _steps(home: Path) -> list[tuple[str, str]]:
    import sqlite3

    with sqlite3.connect(f"file:{home / 'experience' / 'catalog.sqlite'}?mode=ro", uri=True) as db:
        return db.execute("SELECT trajectory_id, error_type FROM steps").fetchall()


def _open_under(root: Path) -> list[str]:
    fds = Path("/proc/self/fd")
    out = []
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(str(root)):
            out.append(target)
    return out


def test_the_store_a_search_opened_is_closed_when_the_app_stops(ui_home: UiHome) -> None:
    root = ui_home.path / "experience"
    before = Counter(_open_under(root))  # what earlier tests' clients hold
    with TestClient(create_app(ui_home.path, embedding="hash"), base_url="http://localhost") as app_client:
        assert app_client.get("/experience?q=error").status_code == 200
        assert Counter(_open_under(root)) - before  # the search opened the store
    assert not Counter(_open_under(root)) - before
