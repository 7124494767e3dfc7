"""`recreate evolve` as a user runs it: a real subprocess, killed with SIGKILL and resumed."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.experience.store import ExperienceStore
from recreate.optimizer import EvolveConfig
from recreate.scaffold import ScaffoldStore, read_dir
from recreate.testing import Reply, ScriptedOpenAIServer
from tests.optimizer.script import EVALUATOR, GATE_ALPHA, WORDS, responder
from tests.optimizer.test_evolve import SEED, optimizer


def evolve_args(home: Path, url: str | None, *extra: str) -> list[str]:
    args = [
        sys.executable,
        "-m",
        "recreate",
        "evolve",
        "--seed",
        str(SEED),
        "--domain",
        "jsonl",
        "--data",
        str(WORDS / "tasks.jsonl"),
        "--evaluator",
        EVALUATOR,
        "--gate-alpha",
        str(GATE_ALPHA),
        "--rounds",
        "2",
        "--batch-size",
        "3",
        "--concurrency",
        "4",
        "--home",
        str(home),
        *extra,
    ]
    return args + (["--model", f"scripted@{url}"] if url else [])


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RECREATE_MODEL")
    }
    return env | {"RECREATE_EMBEDDING": "hash", "COLUMNS": "200"} | extra


def test_dry_run_previews_cost_without_calling(recreate_home, openai_server):
    args = evolve_args(recreate_home, None, "--dry-run", "--model", "openai:gpt-4.1-mini")
    res = subprocess.run(args, capture_output=True, text=True, env=clean_env(), timeout=120)
    assert res.returncode == 0, res.stderr
    assert "evolve plan: 2 rounds × 3 tasks" in res.stdout and "$" in res.stdout
    assert not openai_server.requests
    assert "warning" not in res.stdout  # the words tasks' 3 validation tasks, at their stated level


def test_the_plan_says_when_the_gate_can_accept_no_improvement(recreate_home) -> None:
    args = evolve_args(recreate_home, None, "--dry-run", "--model", "openai:gpt-4.1-mini")
    args.remove("--gate-alpha"), args.remove(str(GATE_ALPHA))  # the default level, 0.025
    res = subprocess.run(args, capture_output=True, text=True, env=clean_env(), timeout=120)
    assert res.returncode == 0, res.stderr
    said = " ".join(res.stdout.split())
    assert "warning: with 3 validation task(s) the gate (a paired test at level 0.025) can accept no " in said
    assert "improvement: it needs 6; give more held-out tasks, or a looser level (--gate-alpha 0.125)" in said


def test_the_plan_counts_the_runs_of_fine_tuning_steps() -> None:
    from recreate.optimizer.plan import projected_cost

    cfg = EvolveConfig(rounds=4, batch_size=3, val_seeds=1)
    plain, tuned = (
        projected_cost(
            cfg,
            n_val=5,
            scaffold_chars=4000,
            max_steps=2,
            agent="local",
            optimizer="local",
            finetune_every=every,
            finetune_group_size=4,
        )  # fmt: skip
        for every in (None, 2)
    )
    # 2 steps, each: 3 tasks × 2 rounds × 4 runs to train on, and both versions on the 5 validation tasks
    assert tuned[0][1] - plain[0][1] == 2 * (3 * 2 * 4 + 2 * 5) * 2  # × max_steps calls per run
    assert tuned[1:] == plain[1:]  # the meta-agents' calls do not change


def test_fine_tuning_in_the_loop_needs_the_local_model(recreate_home, openai_server):
    args = evolve_args(recreate_home, openai_server.url, "--finetune-every", "1")
    res = subprocess.run(args, capture_output=True, text=True, env=clean_env(), timeout=120)
    assert res.returncode == 2 and "--finetune-every" in res.stderr and "--model local" in res.stderr
    assert "Traceback" not in res.stderr and not openai_server.requests


@pytest.mark.slow
def test_kill9_at_several_points_then_resume_reaches_the_same_scaffold(recreate_home):
    domain = get_domain("jsonl", data=WORDS / "tasks.jsonl", evaluator=EVALUATOR)
    with ScriptedOpenAIServer(responder) as clean:
        reference = optimizer(recreate_home / "ref", clean.url).optimize(
            seed=SEED, domain=domain, trainset=domain.tasks("train"), valset=domain.tasks("val")
        )
    expected = ScaffoldStore(recreate_home / "ref" / "scaffolds").load(reference.final).content_hash()

    home = recreate_home / "killed"
    state = {"proc": None, "kill_at": None}
    lock = threading.Lock()

    def killing_responder(body):
        with lock:
            state["seen"] = state.get("seen", 0) + 1
            if state["kill_at"] is not None and state["seen"] >= state["kill_at"]:
                state["kill_at"] = None
                state["proc"].send_signal(signal.SIGKILL)
        return responder(body)

    with ScriptedOpenAIServer(killing_responder) as srv:
        for attempt, kill_after in enumerate([6, 14, 14, None]):
            extra = ["--run", "killed"] if attempt == 0 else ["--resume", "killed"]
            with lock:
                state["seen"], state["kill_at"] = 0, kill_after
                state["proc"] = subprocess.Popen(
                    evolve_args(home, srv.url, *extra),
                    env=clean_env(),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            out, err = state["proc"].communicate(timeout=300)
            if kill_after is not None:
                assert state["proc"].returncode == -signal.SIGKILL, (out, err)
        assert state["proc"].returncode == 0, err
    final = ScaffoldStore(home / "scaffolds").head("minimal")
    assert final.hash == expected
    assert "final: minimal@v2" in out
    # no finished rollout was paid twice: one stored trajectory per (scaffold, task, seed)
    store = ExperienceStore(home / "experience", embedding="hash")
    keys = [(e.scaffold_hash, e.task_id, store.get(e.id).seed) for e in store.list()]
    # validation: each version once, plus the parent re-scored on the second gate's fresh seeds; training
    assert len(keys) == len(set(keys)) == (len(reference.history) + 1) * 3 + 2 * 3


def test_endpoint_faults_are_retried_to_the_same_result(recreate_home):
    domain = get_domain("jsonl", data=WORDS / "tasks.jsonl", evaluator=EVALUATOR)
    sets = {"trainset": domain.tasks("train"), "valset": domain.tasks("val")}
    with ScriptedOpenAIServer(responder, fault_rate=0.2, fault_seed=7) as faulty:
        result = optimizer(recreate_home, faulty.url).optimize(seed=SEED, domain=domain, **sets)
        assert faulty.faults_served > 5
    assert result.finished and [h["accepted"] for h in result.history] == [True, True, False]


def test_the_run_prints_a_timed_line_per_stage(recreate_home):
    with ScriptedOpenAIServer(responder) as srv:
        args = evolve_args(recreate_home, srv.url, "--run", "lines")
        args[args.index("--rounds") + 1] = "1"
        res = subprocess.run(args, capture_output=True, text=True, env=clean_env(), timeout=300)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    stages = [
        "validating minimal@v1 on 3 tasks",
        "minimal@v1: validation mean",
        "round 1/1: minimal@v1 runs 3 training tasks",
        "round 1: task ",
        "round 1: 3 proposals synthesized into a patch: ok",
        "round 1: minimal@v2 accepted",
    ]
    found = [next((n for n, line in enumerate(lines) if stage in line), None) for stage in stages]
    assert None not in found and found == sorted(found), res.stdout  # in order, before the summary
    assert sum("round 1: task " in line for line in lines) == 3
    assert "Traceback" not in res.stderr
    progress = lines[: found[-1] + 1]
    # to a pipe: one plain timed line per stage, neither padded nor folded to a width
    assert all(re.fullmatch(r"\[\d\d:\d\d:\d\d\] \S.*\S", line) for line in progress), progress


def test_the_progress_logger_is_given_back_as_it_was_after_the_command(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from recreate.optimizer.cli import _progress_lines

    progress = logging.getLogger("recreate.progress")
    with _progress_lines():
        assert not progress.propagate  # the command's console prints them, once
    with caplog.at_level(logging.INFO):
        progress.info("round 2: a line for the caller's handlers")  # an in-process caller's next run
    assert progress.propagate and progress.level == logging.NOTSET
    assert "round 2: a line for the caller's handlers" in caplog.text


def test_a_run_stopped_by_its_budget_resumes_to_its_end_with_a_raised_limit(recreate_home: Path) -> None:
    with ScriptedOpenAIServer(responder) as srv:
        args = evolve_args(recreate_home, srv.url, "--max-rollouts", "4")
        args[args.index("--rounds") + 1] = "1"
        stopped = subprocess.run(
            [*args, "--run", "budget"], capture_output=True, text=True, env=clean_env(), timeout=300
        )
        assert stopped.returncode == 3, stopped.stderr
        assert "stopped: budget exceeded: rollouts used 4 of 4" in stopped.stdout
        assert "resume with --resume budget" in stopped.stdout
        exported = recreate_home / "runs" / "budget" / "scaffold"
        assert (exported / "scaffold.yaml").is_file()  # the stopped run's scaffold so far

        args[args.index("--max-rollouts") + 1] = "100"
        resumed = subprocess.run(
            [*args, "--resume", "budget"], capture_output=True, text=True, env=clean_env(), timeout=300
        )
    assert resumed.returncode == 0, resumed.stderr
    assert "final: minimal@v2" in resumed.stdout and "Traceback" not in resumed.stderr
    store = ScaffoldStore(recreate_home / "scaffolds")
    assert read_dir(exported).content_hash() == store.load("minimal@v2").content_hash()  # replaced


def test_the_version_grid_names_every_model_version_in_full_on_a_narrow_console(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from recreate.optimizer.cli import console
    from recreate.optimizer.optimizer import EvolveResult
    from recreate.optimizer.summary import print_grid

    base = "smollm2-135m-instruct"
    tuned = [f"{base}+ft1-d68d433e", f"{base}+ft1-59ccfcd4"]  # two rejected candidates of round 1 and 2
    history = [{"ref": "arithmetic@v1", "model": base, "val": {"a": 1.0, "b": 1.0}, "accepted": True}]
    step = {"scaffold": "arithmetic@v1", "parent": base, "parent_val": {"a": 1.0}, "val": {"a": 0.0}}
    models = [step | {"model": name} for name in tuned]
    result = EvolveResult(run_id="r", run_dir=tmp_path, final="arithmetic@v1", history=history, models=models)
    monkeypatch.setattr(console, "width", 80)  # what a log file or a pipe gets
    with console.capture() as captured:
        print_grid(console, result)
    text = captured.get()
    assert "…" not in text and "d68d433e" in text and "59ccfcd4" in text, text
    # the base model: 2 runs of the seed's validation and 1 in each step's gate, pooled and counted
    assert "1.000 (4)" in text and text.count("0.000 (1)") == 2, text


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_says_so_at_once_and_how_to_resume(recreate_home, sig):
    state: dict = {"proc": None, "seen": 0}
    lock = threading.Lock()

    def interrupting_responder(body):
        with lock:
            state["seen"] += 1
            if state["seen"] == 6:  # mid-run: the run's config is written, rounds are under way
                state["proc"].send_signal(sig)
        return responder(body)

    with ScriptedOpenAIServer(interrupting_responder) as srv:
        with lock:
            state["proc"] = subprocess.Popen(
                evolve_args(recreate_home, srv.url, "--run", "stopped"),
                env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
        out, err = state["proc"].communicate(timeout=300)
        assert state["proc"].returncode == 130, (out, err)
        assert "interrupted: stopping once the running model calls return" in err and "Traceback" not in err
        assert "interrupted; resume with --resume stopped" in out
        resumed = subprocess.run(
            evolve_args(recreate_home, srv.url, "--resume", "stopped"),
            capture_output=True, text=True, env=clean_env(), timeout=300,
        )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming run stopped" in resumed.stdout and "final: minimal@v2" in resumed.stdout


@pytest.mark.parametrize("who", ["optimizer", "synthesis"])
def test_a_failing_optimizer_endpoint_stops_the_run_resumably(recreate_home, who):
    """A meta-agent call that fails past the client's retries is not a round with nothing to propose."""
    state = {"down": True}

    def flaky_optimizer(body):
        synthesis = "synthesis agent" in str(body["messages"][0].get("content", ""))
        if state["down"] and (who == "optimizer" or synthesis):
            return Reply(status=401, error="the key was revoked")  # not retried by the client
        return responder(body)

    with ScriptedOpenAIServer(responder) as agent, ScriptedOpenAIServer(flaky_optimizer) as meta:
        args = evolve_args(recreate_home, agent.url, "--optimizer-model", f"scripted@{meta.url}")
        args[args.index("--rounds") + 1] = "1"
        stopped = subprocess.run(
            [*args, "--run", "down"], capture_output=True, text=True, env=clean_env(), timeout=300
        )
        assert stopped.returncode == 3, stopped.stderr
        out = " ".join(stopped.stdout.split())
        assert f"stopped: the {who} model's endpoint failed: " in out and "the key was revoked" in out, out
        assert "resume with --resume down" in out and "Traceback" not in stopped.stderr
        state["down"] = False
        resumed = subprocess.run(
            [*args, "--resume", "down"], capture_output=True, text=True, env=clean_env(), timeout=300
        )
    assert resumed.returncode == 0, resumed.stderr
    assert "final: minimal@v2" in resumed.stdout  # the round's reflections ran once the endpoint was back


def test_a_step_that_finishes_after_an_interrupt_leaves_no_traceback(caplog):
    """After Ctrl-C the graph's executor is shut down; a step finishing then cannot schedule its checkpoint
    write, and concurrent.futures logs that with a traceback. The interrupt's filter drops exactly that."""
    import logging
    from concurrent.futures import ThreadPoolExecutor

    from recreate.optimizer.cli import _after_shutdown

    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    logger = logging.getLogger("concurrent.futures")
    logger.addFilter(_after_shutdown)
    try:
        with ThreadPoolExecutor(1) as other:
            other.submit(lambda: None).add_done_callback(lambda _: pool.submit(print))
            other.submit(lambda: None).add_done_callback(lambda _: 1 / 0)  # any other failure still shows
    finally:
        logger.removeFilter(_after_shutdown)
    said = [str(r.exc_info[1]) for r in caplog.records if r.name == "concurrent.futures" and r.exc_info]
    assert said == ["division by zero"]
