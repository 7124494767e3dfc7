"""Run ids are plain names: no command or function puts a run's files outside <home>/runs or <home>/evals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import recreate
from recreate.cli import main
from recreate.runs import RUN_ID, BadRunId, RunNotFound, check_run_id
from tests.evaluation.conftest import EVALUATOR, EXAMPLE, MINIMAL, write_tasks
from tests.optimizer.test_evolve import SEED
from tests.optimizer.test_evolve_cli import evolve_args

ESCAPES = ["../x", "../../escaped", "/abs", "/tmp/abs", "a/b", "..", ".", ".hidden", "a\\..\\b", "", "x\n"]
ESCAPES += ["-flag", "a" * 129, "ok/../..", "~root", "a b", "é"]
FINETUNE = ["recreate", "finetune", "--domain", "jsonl", "--data", "tasks.jsonl"]


@given(st.text(max_size=140))
def test_an_accepted_id_is_one_path_component_under_its_parent(run_id: str) -> None:
    try:
        checked = check_run_id(run_id)
    except BadRunId as exc:
        assert "\n" not in str(exc) and "run_id=" in str(exc) and "--run NAME" in exc.for_cli()
        return
    assert checked == run_id and len(run_id) <= 128
    parent = Path("/home/runs")
    assert (parent / run_id).parent == parent and (parent / run_id).resolve().parent == parent


@given(st.from_regex(RUN_ID, fullmatch=True))
def test_every_plain_name_is_accepted(run_id: str) -> None:
    assert check_run_id(run_id) == run_id


@pytest.mark.parametrize("bad", ESCAPES)
def test_escaping_ids_are_refused(bad: str) -> None:
    with pytest.raises(BadRunId):
        check_run_id(bad)


def _cli_error(monkeypatch, capsys, argv: list[str]) -> str:
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("bad", ["../x", "/abs", "a/b", ".."])
def test_eval_refuses_an_escaping_run(monkeypatch, capsys, recreate_home, tmp_path, bad) -> None:
    data = write_tasks(tmp_path / "tasks.jsonl", 1)
    argv = ["recreate", "eval", "--scaffold", str(MINIMAL), "--domain", "jsonl", "--data", str(data)]
    argv += ["--split", "all", "--evaluator", EVALUATOR, "-o", f"evaluator_dir={EXAMPLE}", "--run", bad]
    err = _cli_error(monkeypatch, capsys, [*argv, "--no-progress", "--sandbox", "local"])
    assert err.startswith(f"error: run id {bad!r} is not a plain name; pass --run NAME")
    assert not list(tmp_path.rglob("results.json")) and not Path("/abs").exists()


@pytest.mark.parametrize(("option", "bad"), [("--run", "../x"), ("--run", "/abs"), ("--resume", "a/b")])
def test_evolve_refuses_an_escaping_run(monkeypatch, capsys, recreate_home, option, bad) -> None:
    argv = ["recreate", *evolve_args(recreate_home, None)[3:], option, bad]
    err = _cli_error(monkeypatch, capsys, argv)
    assert err.startswith(f"error: run id {bad!r} is not a plain name; pass {option} NAME")
    assert not recreate_home.exists()


def test_finetune_refuses_an_escaping_run(monkeypatch, capsys, recreate_home, tmp_path) -> None:
    (tmp_path / "outside" / "trajectories").mkdir(parents=True)  # a run-like directory outside the home
    err = _cli_error(monkeypatch, capsys, FINETUNE + ["--run", "../../outside", "--dry-run"])
    assert "run id '../../outside' is not a plain name; pass --run NAME" in err


@pytest.mark.parametrize("bad", ["../x", "/abs", "a/b", ".."])
def test_optimize_refuses_an_escaping_run_id_before_writing(recreate_home, tmp_path, bad) -> None:
    with pytest.raises(BadRunId) as caught:
        recreate.optimize(SEED, None, model="openai:gpt-4.1-mini", run_id=bad)  # type: ignore[arg-type]
    assert "run_id='NAME'" in str(caught.value) and "\n" not in str(caught.value)
    assert not recreate_home.exists() and sorted(p.name for p in tmp_path.iterdir()) == []


def test_load_run_does_not_read_a_run_outside_the_home_by_id(recreate_home) -> None:
    outside = recreate_home / "outside"  # <home>/runs/../outside
    outside.mkdir(parents=True)
    (outside / "config.json").write_text("{}")
    (recreate_home / "runs").mkdir()
    with pytest.raises(RunNotFound):
        recreate.load_run("../outside")  # not a run id, and from the working directory not a run directory
