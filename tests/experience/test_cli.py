"""`recreate experience ...` end to end, as a user runs it (real subprocesses, RECREATE_HOME)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def experience(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RECREATE_EMBEDDING": "hash", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "recreate", "experience", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


@pytest.mark.slow
def test_import_ls_search_show_verify_reindex_export(recreate_home: Path, tmp_path: Path) -> None:
    res = experience("import", str(FIXTURES / "acme__widgets-42.traj.json"))
    assert res.returncode == 0, res.stderr
    assert "1 added" in res.stdout
    res = experience("import", str(FIXTURES / "chats.jsonl"))
    assert res.returncode == 1  # some lines were bad: reported, the good ones stored
    assert "chats.jsonl:3: not valid JSON" in res.stderr and "3 added" in res.stdout
    again = experience("import", str(FIXTURES / "acme__widgets-42.traj.json"))
    assert "1 duplicate(s) skipped" in again.stdout and again.returncode == 0

    listing = experience("ls", "--domain", "swe")
    (line,) = listing.stdout.splitlines()
    trajectory_id = line.split()[0]
    assert "task=acme__widgets-42" in line

    hits = experience("search", "pytest size tests failed", "-k", "3", "--task", "acme__widgets-42").stdout
    first = hits.splitlines()[0]
    assert first.startswith(trajectory_id) and "task=acme__widgets-42" in first and "step=" in first

    shown = experience("show", trajectory_id, "--view", "index", "--budget", "300").stdout
    assert "widgets/size.py" in shown and "pytest" in shown and len(shown) <= 300 * 4 + 1
    missing = experience("show", "t-nope")
    assert missing.returncode == 2 and missing.stderr.startswith("error: no trajectory 't-nope'")

    assert experience("verify").returncode == 0
    with sqlite3.connect(recreate_home / "experience" / "catalog.sqlite") as db:
        db.execute("DELETE FROM trajectories WHERE id = ?", (trajectory_id,))
    drift = experience("verify")
    assert drift.returncode == 1 and "uncataloged files: 1" in drift.stdout
    assert experience("reindex").returncode == 0
    assert experience("verify").returncode == 0

    out = tmp_path / "export.jsonl"
    assert experience("export", str(out), "--domain", "math").returncode == 0
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["task_id"] == "mult-17-23" and record["schema_version"] == 1
