"""`recreate scaffold ...` commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from recreate.scaffold import ScaffoldStore, write_dir
from recreate.scaffold.cli import app
from tests.scaffold.conftest import REPO, SEEDS, make_scaffold

runner = CliRunner()


@pytest.fixture
def store_root(tmp_path):
    return str(tmp_path / "store")


def invoke(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_validate_lists_every_problem(tmp_path):
    bad = write_dir(make_scaffold(instance_template="no task", tools=[]), tmp_path / "bad")
    (bad / "memory.jsonl").write_text("not json\n")
    result = invoke("validate", str(bad))
    assert result.exit_code == 1
    assert "1 problem(s)" in result.output and "memory.jsonl:1" in result.output
    (bad / "memory.jsonl").write_text("")
    result = invoke("validate", str(bad))
    assert result.exit_code == 1 and "must use {{ task }}" in result.output
    good = invoke("validate", str(SEEDS / "math"))
    assert good.exit_code == 0 and "valid math: 1 tools, 2 rules" in good.output


def test_commit_apply_log_diff_rollback_export(tmp_path, store_root):
    committed = invoke("commit", str(SEEDS / "minimal"), "--store", store_root, "-m", "seed")
    assert committed.exit_code == 0 and committed.output.startswith("minimal@v1 ")
    ops = tmp_path / "ops.json"
    ops.write_text(json.dumps([{"op": "add_rule", "text": "Test before submitting.", "evidence": ["t1"]}]))
    applied = invoke("apply", "minimal", str(ops), "--store", store_root)
    assert (
        applied.exit_code == 0 and "minimal@v2" in applied.output and "(parent minimal@v1)" in applied.output
    )
    ScaffoldStore(store_root).attach_scores("minimal@v2", {"pass_rate": 0.75}, label="val")
    log = invoke("log", "minimal", "--store", store_root)
    assert "v2 (head)" in log.output and "pass_rate=0.75" in log.output and "v1" in log.output
    diff = invoke("diff", "minimal@v1", "minimal@v2", "--store", store_root)
    assert "+ [rules] r1: Test before submitting." in diff.output
    rolled = invoke("rollback", "minimal", "--store", store_root)
    assert rolled.exit_code == 0 and "head is now minimal@v1" in rolled.output
    exported = invoke("export", "minimal@v2", str(tmp_path / "out"), "--store", store_root)
    assert exported.exit_code == 0 and (tmp_path / "out/scaffold.yaml").is_file()
    shown = invoke("show", str(tmp_path / "out"), "--task", "Count the files.")
    assert "[r1] Test before submitting." in shown.output and "Count the files." in shown.output


def test_apply_with_a_bad_op_changes_nothing(tmp_path, store_root):
    invoke("commit", str(SEEDS / "minimal"), "--store", store_root)
    ops = tmp_path / "ops.json"
    ops.write_text('[{"op": "set_field", "field": "limits.max_steps", "value": 100000}]')
    result = invoke("apply", "minimal", str(ops), "--store", store_root)
    assert result.exit_code == 1 and "exceeds the configured bound" in result.output
    assert ScaffoldStore(store_root).versions("minimal") == [1]


def test_root_cli_exposes_the_sub_app(tmp_path):
    env = {**os.environ, "COLUMNS": "200", "RECREATE_HOME": str(tmp_path / "home")}
    res = subprocess.run(
        [sys.executable, "-m", "recreate", "scaffold", "show", "nothing-here"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert res.returncode == 2
    assert res.stderr.startswith("error: no scaffold named 'nothing-here'")


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\xff", "is not UTF-8 text"),  # was a bare "'utf-8' codec can't decode ..."
        (None, "cannot be read (No such file or directory)"),  # was a bare "[Errno 2] ..."
    ],
)
def test_an_ops_file_that_is_not_text_is_one_line_naming_it(tmp_path, store_root, content, said):
    invoke("commit", str(SEEDS / "minimal"), "--store", store_root)
    ops = tmp_path / "ops.json"
    if content is not None:
        ops.write_bytes(content)
    result = invoke("apply", "minimal", str(ops), "--store", store_root)
    message = " ".join(result.output.split())
    assert result.exit_code == 2 and f"{ops} {said}; pass a JSON file of edit ops" in message, result.output
    assert ScaffoldStore(store_root).versions("minimal") == [1]
