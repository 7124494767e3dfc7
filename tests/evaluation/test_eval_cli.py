"""`recreate eval` as a real subprocess: report files, resume after SIGKILL, leakage refusal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recreate.scaffold import ScaffoldStore, load_scaffold
from tests.evaluation.conftest import EVALUATOR, EXAMPLE, MINIMAL, REPO, solver, write_tasks

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def _eval_argv(data: Path, url: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "recreate", "eval", "--scaffold", str(MINIMAL), "--domain", "jsonl",
        "--data", str(data), "--split", "all", "--model", f"scripted@{url}", "--evaluator", EVALUATOR,
        "-o", f"evaluator_dir={EXAMPLE}", "--sandbox", "bwrap", "--run-id", "cli-run", "--no-progress",
        *extra,
    ]  # fmt: skip


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "RECREATE_MODEL")}
    return env | {"RECREATE_HOME": str(home), "PYTHONPATH": str(REPO)}


def _solved(requests: list[dict]) -> set[str]:
    return {r["messages"][1]["content"].split("`")[1].split("(")[0] for r in requests}


def test_eval_survives_sigkill_resumes_without_rerunning_and_writes_the_report(
    openai_server, bwrap, tmp_path
):
    data = write_tasks(tmp_path / "tasks.jsonl", 10)
    openai_server.responder = solver(wrong={"add_7"}, delay_s=0.4)
    home = tmp_path / "home"
    cache = home / "rollouts"
    proc = subprocess.Popen(_eval_argv(data, openai_server.url, "--concurrency", "2"), env=_env(home),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    deadline = time.time() + 120
    while len(list(cache.rglob("*.json"))) < 3:
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.time() < deadline, "no rollout finished in time"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = {json.loads(p.read_text())["task_id"].replace("-", "_") for p in cache.rglob("*.json")}
    partial = json.loads((home / "evals" / "cli-run" / "results.json").read_text())
    assert partial["complete"] is False and len(partial["tasks"]) >= 1
    before = len(openai_server.requests)

    openai_server.responder = solver(wrong={"add_7"})
    done = subprocess.run(_eval_argv(data, openai_server.url), env=_env(home), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    assert f"resuming: {len(finished)} rollout(s) already finished" in done.stderr
    rerun = _solved(openai_server.requests[before:])
    assert rerun and not (rerun & finished)  # nothing finished before the kill was paid for again

    out = home / "evals" / "cli-run"
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] is True and len(results["tasks"]) == 10
    summary = results["summary"]
    assert summary["pass_at_1"] == pytest.approx(0.9) and summary["tasks"] == 10
    assert summary["pass_at_1_ci"][0] <= 0.9 <= summary["pass_at_1_ci"][1]
    assert summary["cost_per_task_usd"] == pytest.approx(0.002)
    bad = next(t for t in results["tasks"] if t["task_id"] == "add-7")
    assert bad["score"] == 0 and "add_7(*[1]) returned 9, expected 8" in bad["feedback"]
    assert "pass@1" in done.stdout and "0.900" in done.stdout  # the rich summary table
    page = (out / "report.html").read_text()
    assert page.count("<tr class='pass'>") == 9 and page.count("<tr class='fail'>") == 1
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_eval_refuses_test_scores_on_tasks_the_scaffold_was_evolved_on(openai_server, tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", 40)
    home = tmp_path / "home"
    store = ScaffoldStore(home / "scaffolds")
    seed = store.commit(load_scaffold(MINIMAL))
    child = load_scaffold(MINIMAL).model_copy(update={"description": "evolved once"})
    evolved = store.commit(child, parent=seed.ref)
    store.attach_scores(evolved.ref, {f"add-{i}": 1.0 for i in range(40)}, label="val")

    argv = _eval_argv(data, openai_server.url)
    argv[argv.index("--scaffold") + 1] = evolved.ref
    argv[argv.index("--split") + 1] = "test"
    done = subprocess.run(argv, env=_env(home), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "were used to evolve this scaffold" in done.stderr
    assert openai_server.requests == []  # refused before any model call

    argv[argv.index("--scaffold") + 1] = seed.ref  # the seed itself was evolved on nothing
    argv += ["--limit", "1"]
    openai_server.responder = solver()
    done = subprocess.run(argv, env=_env(home), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
