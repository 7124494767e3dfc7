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

from recreate.experience.schema import load_trajectory
from recreate.scaffold import ScaffoldStore, load_scaffold
from recreate.testing import Reply, tool_call
from tests.evaluation.conftest import EVALUATOR, EXAMPLE, MINIMAL, REPO, solver, write_tasks

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def _eval_argv(data: Path, url: str, *extra: str, domain: str = "jsonl") -> list[str]:
    options = ["--evaluator", EVALUATOR, "-o", f"evaluator_dir={EXAMPLE}"] if domain == "jsonl" else []
    return [
        sys.executable, "-m", "recreate", "eval", "--scaffold", str(MINIMAL), "--domain", domain,
        "--data", str(data), "--split", "all", "--model", f"scripted@{url}", "--sandbox", "bwrap",
        "--run", "cli-run", "--no-progress", *options, *extra,
    ]  # fmt: skip


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "RECREATE_MODEL")}
    return env | {"RECREATE_HOME": str(home), "PYTHONPATH": str(REPO)}


def _solved(requests: list[dict]) -> set[str]:
    return {r["messages"][1]["content"].split("`")[1].split("(")[0] for r in requests}


def kill_then_resume(server, argv: list[str], home: Path, cwd: Path, after: int, responder) -> tuple:
    """Start `recreate eval`, SIGKILL it once `after` rollouts are cached, run it again to the end.
    Returns (task ids finished before the kill, the second run's CompletedProcess, its model requests)."""
    cache = home / "rollouts"
    proc = subprocess.Popen(argv, env=_env(home), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    results = home / "evals" / "cli-run" / "results.json"
    deadline = time.time() + 240
    # a rollout is cached a moment before results.json records it: wait for both, then kill
    while len(list(cache.rglob("*.json"))) < after or not results.exists():
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.time() < deadline, "no rollout finished in time"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = {json.loads(p.read_text())["task_id"] for p in cache.rglob("*.json")}
    partial = json.loads(results.read_text())
    assert partial["complete"] is False and len(partial["tasks"]) >= 1
    before = len(server.requests)
    server.responder = responder
    done = subprocess.run(argv, env=_env(home), cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr + done.stdout
    assert f"resuming: {len(finished)} rollout(s) already finished" in done.stderr
    return finished, done, server.requests[before:]


def test_eval_survives_sigkill_resumes_without_rerunning_and_writes_the_report(
    openai_server, bwrap, tmp_path
):
    data = write_tasks(tmp_path / "tasks.jsonl", 10)
    openai_server.responder = solver(wrong={"add_7"}, delay_s=0.4)
    home = tmp_path / "home"
    argv = _eval_argv(data, openai_server.url, "--concurrency", "2")
    finished, done, rerun = kill_then_resume(openai_server, argv, home, tmp_path, 3, solver(wrong={"add_7"}))
    rerun_tasks = {name.replace("_", "-") for name in _solved(rerun)}
    assert rerun_tasks and not (rerun_tasks & finished)  # nothing finished before the kill was paid again

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


DS1000_PICK = {"Pandas": 2, "Numpy": 2, "Scipy": 2, "Sklearn": 2, "Matplotlib": 2}
NEEDS_NETWORK = {519, 539, 819}  # seaborn load_dataset / fetch_california_housing


@pytest.mark.shared_data
def test_eval_on_ten_ds1000_tasks_resumes_after_sigkill(openai_server, bwrap, shared_data, tmp_path):
    from recreate.domains.ds1000.env import is_ready

    env = Path(os.environ.get("RECREATE_DS1000_ENV") or REPO / ".recreate" / "envs" / "ds1000")
    if not is_ready(env):
        pytest.skip(f"the DS-1000 environment is not built at {env} (recreate domain setup ds1000)")
    rows, wanted = [], dict(DS1000_PICK)
    for line in (shared_data / "ds1000" / "ds1000_dev.jsonl").read_text().splitlines():
        row = json.loads(line)
        library, pid = row["metadata"]["library"], row["metadata"]["problem_id"]
        if wanted.get(library) and pid not in NEEDS_NETWORK:
            wanted[library] -= 1
            rows.append(row)
    data = tmp_path / "ds1000_10.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    wrong = {rows[1]["metadata"]["problem_id"], rows[6]["metadata"]["problem_id"]}

    def respond(body: dict) -> Reply:
        task = body["messages"][1]["content"]
        row = next(r for r in rows if r["prompt"].strip()[:300] in task)
        if len(body["messages"]) == 2:
            return tool_call("bash", {"command": "python3 -c 'import pandas; print(pandas.__version__)'"})
        solution = "result = None" if row["metadata"]["problem_id"] in wrong else row["reference_code"]
        return tool_call("submit", {"answer": solution}, cost=0.001)

    openai_server.responder = respond
    home = tmp_path / "home"
    argv = _eval_argv(data, openai_server.url, "--concurrency", "2", "-o", f"env={env}", domain="ds1000")
    finished, done, rerun = kill_then_resume(openai_server, argv, home, tmp_path, 2, respond)
    rerun_tasks = {f"ds1000-{r['metadata']['problem_id']}" for r in rows for q in rerun
                   if r["prompt"].strip()[:300] in q["messages"][1]["content"]}  # fmt: skip
    assert rerun_tasks and not (rerun_tasks & finished)

    results = json.loads((home / "evals" / "cli-run" / "results.json").read_text())
    assert results["complete"] and len(results["tasks"]) == 10
    passed = {t["task_id"] for t in results["tasks"] if t["passed"]}
    assert passed == {f"ds1000-{r['metadata']['problem_id']}" for r in rows} - {f"ds1000-{p}" for p in wrong}
    assert results["summary"]["pass_at_1"] == pytest.approx(0.8)
    failed = [t for t in results["tasks"] if not t["passed"]]
    assert all(t["feedback"] for t in failed)  # the reason is in the report
    assert (home / "evals" / "cli-run" / "report.html").is_file()
    assert (home / "evals" / "cli-run" / "chart.png").is_file()
    first = load_trajectory(next((home / "rollouts").rglob("*.json")))
    assert first.steps[0].observation.stdout == "1.5.3\n"  # the agent works with the pinned libraries
