"""`recreate eval` refuses an unreachable endpoint in one line with its URL, before any rollout."""

from __future__ import annotations

import json
import shutil
import sys
import time

import pytest

from recreate.cli import main
from tests.evaluation.conftest import EVALUATOR, EXAMPLE, MINIMAL, solver, write_tasks


def test_unreachable_endpoint_is_one_line_with_the_url(monkeypatch, capsys, recreate_home, tmp_path):
    url = "http://127.0.0.1:9/v1"  # the discard port: connection refused
    data = write_tasks(tmp_path / "tasks.jsonl", 2)
    argv = ["recreate", "eval", "--scaffold", str(MINIMAL), "--domain", "jsonl", "--data", str(data)]
    argv += ["--split", "all", "--model", f"m@{url}"]  # exact match: no /evaluator, which local cannot show
    monkeypatch.setattr(sys, "argv", [*argv, "--no-progress", "--sandbox", "local"])
    started = time.monotonic()
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    said = f"error: --model m@{url}: cannot reach the model endpoint {url}"
    assert done.value.code == 2 and err.startswith(said)
    assert err.count("\n") == 1 and time.monotonic() - started < 20


def _argv(data, url: str, scaffold, *extra: str) -> list[str]:
    return ["recreate", "eval", "--scaffold", str(scaffold), "--domain", "jsonl", "--data", str(data),
            "--split", "all", "--model", f"scripted@{url}", "--sandbox", "bwrap", "--no-progress",
            *extra]  # fmt: skip


@pytest.mark.bwrap
def test_no_scored_rollout_measures_nothing_and_exits_3(
    openai_server, bwrap, monkeypatch, capsys, recreate_home, tmp_path
):
    openai_server.responder = solver()
    judge = tmp_path / "judge.py"
    judge.write_text("def judge(task, submission):\n    raise RuntimeError('the judge is broken')\n")
    data = write_tasks(tmp_path / "tasks.jsonl", 2)
    monkeypatch.setattr(sys, "argv", _argv(data, openai_server.url, MINIMAL, "--evaluator", f"{judge}:judge"))
    with pytest.raises(SystemExit) as done:
        main()
    out, err = capsys.readouterr()
    assert done.value.code == 3
    assert "n/a (no rollout scored)" in out and "0.000 [" not in out
    assert "2 of 2 rollouts were not scored" in err and "nothing was measured" in err
    results = json.loads(next((recreate_home / "evals").glob("*/results.json")).read_text())
    assert results["complete"] is False and results["summary"]["machine_errors"] == 2


def test_a_scaffold_whose_template_cannot_render_is_refused_before_any_rollout(
    openai_server, monkeypatch, capsys, recreate_home, tmp_path
):
    broken = tmp_path / "broken"
    shutil.copytree(MINIMAL, broken)
    text = (broken / "scaffold.yaml").read_text()
    (broken / "scaffold.yaml").write_text(text.replace("{{ task }}", "{{ task ", 1))
    data = write_tasks(tmp_path / "tasks.jsonl", 2)
    argv = _argv(data, openai_server.url, broken, "--evaluator", EVALUATOR, "-o", f"evaluator_dir={EXAMPLE}")
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.startswith("error:") and err.count("\n") == 1
    assert "instance_template" in err and "template syntax error" in err
    assert openai_server.requests == []


@pytest.mark.bwrap
def test_a_password_in_the_model_url_reaches_no_result_file(
    openai_server, bwrap, monkeypatch, capsys, recreate_home, tmp_path
):
    openai_server.responder = solver()
    url = openai_server.url.replace("http://", "http://user:sekretpass999@")
    argv = _argv(write_tasks(tmp_path / "tasks.jsonl", 1), url, MINIMAL, "--evaluator", EVALUATOR, "-o",
                 f"evaluator_dir={EXAMPLE}")  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0, capsys.readouterr()
    out = next((recreate_home / "evals").iterdir())
    for name in ("results.json", "report.html"):
        text = (out / name).read_text()
        assert "sekretpass999" not in text and "user:***@" in text
