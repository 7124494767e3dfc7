"""`recreate experience ...` as a user runs it: in-process for most commands, real subprocesses for the
entry point's exit codes and one-line errors."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recreate.experience.cli import app

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def run(recreate_home: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("RECREATE_EMBEDDING", "hash")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


def entry_point(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RECREATE_EMBEDDING": "hash", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "recreate", "experience", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


def test_import_ls_search_show_export(run, tmp_path: Path) -> None:
    res = run("import", str(FIXTURES / "acme__widgets-42.traj.json"))
    assert res.exit_code == 0, res.output
    assert "1 added" in res.output
    res = run("import", str(FIXTURES / "chats.jsonl"))
    assert res.exit_code == 1  # some lines were bad: reported, the good ones stored
    assert "chats.jsonl:3: not valid JSON" in res.output and "3 added" in res.output
    again = run("import", str(FIXTURES / "acme__widgets-42.traj.json"))
    assert "1 duplicate(s) skipped" in again.output and again.exit_code == 0

    (line,) = [x for x in run("ls", "--domain", "swe").output.splitlines() if "task=" in x]
    trajectory_id = line.split()[0]
    assert "task=acme__widgets-42" in line

    hits = run("search", "pytest size tests failed", "-k", "3", "--task", "acme__widgets-42").output
    first = hits.splitlines()[0]
    assert first.startswith(trajectory_id) and "task=acme__widgets-42" in first and "step=" in first

    shown = run("show", trajectory_id, "--view", "index", "--budget", "300").output
    assert "widgets/size.py" in shown and "pytest" in shown and len(shown) <= 300 * 4 + 1

    out = tmp_path / "export.jsonl"
    assert run("export", str(out), "--domain", "math").exit_code == 0
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["task_id"] == "mult-17-23" and record["schema_version"] == 1


@pytest.mark.slow
def test_entry_point_verify_exit_codes_and_reindex(run, recreate_home: Path) -> None:
    assert run("import", str(FIXTURES / "langsmith_runs.json")).exit_code == 0
    missing = entry_point("show", "t-nope")
    assert missing.returncode == 2 and missing.stderr.startswith("error: no trajectory 't-nope'")
    with sqlite3.connect(recreate_home / "experience" / "catalog.sqlite") as db:
        db.execute("DELETE FROM trajectories WHERE task_id = 'primes-5'")
    drift = entry_point("verify")
    assert drift.returncode == 1 and "uncataloged files: 1" in drift.stdout
    assert run("reindex").exit_code == 0
    assert entry_point("verify").returncode == 0


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("ls", "--limit", "-1"), "--limit"),  # was taken: -1 listed all but the first entry
        (("ls", "--limit", "0"), "--limit"),  # was taken: 0 listed every entry
        (("search", "x", "-k", "0"), "-k"),
        (("show", "t-1", "--budget", "0"), "--budget"),
    ],
)
def test_a_count_below_one_is_refused_naming_the_option(run, args, option) -> None:
    result = run(*args)
    assert (
        result.exit_code == 2
        and f"'{option}'" in result.output
        and "greater than or equal to 1" in result.output
    )
