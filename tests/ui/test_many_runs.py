"""A home of many runs: the runs table (polled every few seconds while a run is live) and a version page
without ?run= (which looks through every run) read a finished run's result.json once while its files stay
as they are; a changed file is read again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from recreate.ui import create_app
from recreate.ui.runs import EvolveRun

CONFIG = {"seed_ref": "minimal@v1", "domain": "jsonl", "agent_model": "m"}


def _result(score: float) -> dict[str, object]:
    entry = {"ref": "minimal@v1", "parent": None, "accepted": True, "round": 0, "val": {"a": score}}
    return {"final": "minimal@v1", "history": [entry], "usage": {"agent": {"cost_usd": 0.5}}}


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The run folders EvolveRun.open reads, in order."""
    calls: list[Path] = []
    real = EvolveRun.open

    def counted(run_dir: Path) -> EvolveRun:
        calls.append(run_dir)
        return real(run_dir)

    monkeypatch.setattr(EvolveRun, "open", staticmethod(counted))
    return calls


def test_a_finished_run_is_read_once_while_its_files_stay(tmp_path: Path, opened: list[Path]) -> None:
    home = tmp_path / "home"
    for i in range(5):
        run = home / "runs" / f"evolve-{i}"
        run.mkdir(parents=True)
        (run / "config.json").write_text(json.dumps(CONFIG))
        (run / "result.json").write_text(json.dumps(_result(0.5)))
    client = TestClient(create_app(home, embedding="hash"), base_url="http://127.0.0.1:8765")
    for _ in range(3):
        page = client.get("/runs-table")
        assert page.status_code == 200 and page.text.count(">finished<") == 5
    assert len(opened) == 5
    changed = home / "runs" / "evolve-3" / "result.json"
    changed.write_text(json.dumps(_result(0.25)))
    os.utime(changed, ns=(changed.stat().st_mtime_ns + 10**9,) * 2)
    assert "0.250" in client.get("/runs-table").text
    assert opened[5:] == [changed.parent]
