"""`tapo train --online --config`: the same config file as offline (our keys and TRL names), options
given on the command line over the file over the loop's defaults; --dry-run prints what it resolved."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from recreate.errors import ArgumentError
from recreate.finetune.online import OnlineConfig, _check_resumable, _written, train_config
from recreate.local import LOCAL_TEMPERATURE
from tapo_backend import cli
from tapo_backend.config import ConfigError, LoraSettings
from tests.conftest import REPO

ARITHMETIC = REPO / "examples" / "arithmetic"
ONLINE = ["train", "--online", "--domain", "math", "--data", str(ARITHMETIC / "tasks.jsonl"),
          "--scaffold", str(ARITHMETIC / "scaffold")]  # fmt: skip


def run_tapo(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["tapo", *args])
    try:
        cli.main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, text: str, name: str = "online.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_dry_run_prints_the_file_under_the_options(monkeypatch, capsys, recreate_home, tmp_path) -> None:
    config = write(
        tmp_path,
        "learning_rate: 3.0e-5\nper_device_train_batch_size: 2\nepsilon: 0.3\nwarmup_steps: 2\n"
        "lora: {r: 4}\nseed: 7\nmax_length: 512\n",
    )
    code, out, err = run_tapo(
        monkeypatch, capsys, *ONLINE, "--config", str(config), "--lr", "1e-4", "--algo", "grpo",
        "--iterations", "3", "--dry-run",
    )  # fmt: skip
    assert code == 0, err
    shown = yaml.safe_load(out)
    train, loop = shown["train"], shown["online"]
    assert (train["lr"], train["algo"]) == (1e-4, "grpo")  # the options beat the file
    assert (train["micro_batch_size"], train["warmup_steps"], train["max_length"]) == (2, 2, 512)  # file
    assert train["loss"] == {"clip_low": 0.3, "clip_high": 0.3}  # TRL's epsilon (epsilon_high follows)
    assert train["lora"] == {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": "all-linear"}
    assert (train["max_steps"], train["epochs"]) == (OnlineConfig.steps_per_iteration, 1)  # the defaults
    assert train["temperature"] == LOCAL_TEMPERATURE and train["seed"] == 7 + 1  # the loop's own
    assert loop["iterations"] == 3 and loop["seed"] == 7 and loop["group_size"] == OnlineConfig.group_size
    assert "online-math-grpo" in err and "training" in err
    assert not (recreate_home / "tapo").exists()  # a dry run writes nothing


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("num_generations: 8\n", r"num_generations \(a TRL key\).*--group-size"),
        ("optim: adamw_torch\n", "unknown config key.*optim.*known: .*lr"),
        ("temperature: 1.0\n", "temperature: set by tapo train --online itself"),
        ("learning_rate: 1.0e-5\nlr: 2.0e-5\n", "learning_rate .* and lr are both set"),
        ("algo: ppo\n", "algo must be one of"),
    ],
)
def test_a_bad_file_is_one_line_before_anything_starts(
    monkeypatch, capsys, recreate_home, tmp_path, text, message
) -> None:
    code, out, err = run_tapo(monkeypatch, capsys, *ONLINE, "--config", str(write(tmp_path, text)))
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert re.search(message, err), err
    assert not (recreate_home / "tapo").exists() and not (recreate_home / "models").exists()


def test_a_bad_option_value_is_refused_too(monkeypatch, capsys, recreate_home) -> None:
    code, _, err = run_tapo(monkeypatch, capsys, *ONLINE, "--lr", "-1", "--dry-run")
    assert code == 2 and "lr must be > 0" in err


@settings(max_examples=30, deadline=None)
@given(
    file=st.fixed_dictionaries(
        {},
        optional={
            "lr": st.sampled_from([1e-5, 2e-4]),
            "max_steps": st.integers(1, 9),
            "epochs": st.integers(1, 3),
            "micro_batch_size": st.integers(1, 8),
        },
    ),
    iteration=st.integers(0, 20),
)
def test_every_iteration_trains_with_the_file_over_the_defaults(file, iteration) -> None:
    config = OnlineConfig(seed=3, train=file)
    it = train_config(config, Path("/runs/x/train/it-002"), iteration)
    defaults = {"lr": config.lr, "max_steps": config.steps_per_iteration, "epochs": 1,
                "micro_batch_size": config.micro_batch_size}  # fmt: skip
    for key, default in defaults.items():
        assert getattr(it, key) == file.get(key, default)
    assert it.seed == 3 + iteration and it.output_dir == "/runs/x/train/it-002"
    assert it.lora == LoraSettings(r=config.lora_r, alpha=2 * config.lora_r)


def test_the_loop_sets_what_it_owns() -> None:
    for key in ("temperature", "output_dir", "run_name", "seed"):
        with pytest.raises(ConfigError, match=f"{key}: set by tapo train --online itself"):
            train_config(OnlineConfig(train={key: 1}), Path("/r"), 1)


def test_lag_reaches_the_loop_and_excludes_max_staleness(monkeypatch, capsys, recreate_home) -> None:
    code, out, err = run_tapo(monkeypatch, capsys, *ONLINE, "--lag", "4", "--dry-run")
    assert code == 0, err
    assert yaml.safe_load(out)["online"]["lag"] == 4
    code, _, err = run_tapo(monkeypatch, capsys, *ONLINE, "--lag", "4", "--max-staleness", "1", "--dry-run")
    assert code == 2 and err.count("\n") == 1, err
    assert "--lag and --max-staleness exclude each other" in err
    with pytest.raises(ValueError, match="lag and max_staleness exclude each other"):
        OnlineConfig(lag=2, max_staleness=1)  # the Python API names its arguments


def _started_run(run_dir: Path, config: OnlineConfig) -> Path:
    """A run folder as an interrupted run leaves it: its settings and one row."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(_written(config)))  # as the loop writes it
    (run_dir / "metrics.jsonl").write_text(json.dumps({"iteration": 0}) + "\n")
    return run_dir


def test_a_run_resumes_only_with_the_settings_it_started_with(
    monkeypatch, capsys, recreate_home, tmp_path
) -> None:
    run_dir = _started_run(tmp_path / "run", OnlineConfig(train={"lr": 1e-4}))
    code, _, err = run_tapo(monkeypatch, capsys, *ONLINE, "--output-dir", str(run_dir), "--lr", "3e-4")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: --output-dir {run_dir} holds a run with other settings (train "), err
    assert '"lr": 0.0001' in err and '"lr": 0.0003' in err and "more iterations are fine" in err
    assert json_of(run_dir / "config.json")["train"] == {"lr": 1e-4}  # the run's record is untouched

    _check_resumable(run_dir, OnlineConfig(train={"lr": 1e-4}, iterations=9))  # more iterations: fine
    (run_dir / "metrics.jsonl").write_text("")  # nothing ran under those settings: any may start
    _check_resumable(run_dir, OnlineConfig(train={"lr": 3e-4}))


def test_a_lag_run_of_the_layout_before_the_pipeline_is_not_resumed_under_it(tmp_path) -> None:
    old = OnlineConfig(lag=2)
    run_dir = _started_run(tmp_path / "run", old)
    written = json_of(run_dir / "config.json")
    assert written["lag_layout"] == "pipeline"
    del written["lag_layout"]  # as a lag run wrote it before 2026-12-07 (no batch sampled ahead)
    (run_dir / "config.json").write_text(json.dumps(written))
    with pytest.raises(ArgumentError, match=r'lag_layout null there, "pipeline" now'):
        _check_resumable(run_dir, old)
    on_policy = _started_run(tmp_path / "on-policy", OnlineConfig())
    assert "lag_layout" not in json_of(on_policy / "config.json")  # its layout never changed
    _check_resumable(on_policy, OnlineConfig(iterations=20))


def json_of(path: Path) -> dict:
    return json.loads(path.read_text())


@given(
    tasks=st.integers(1, 12), count=st.integers(1, 20), seed=st.integers(0, 10_000), stop=st.integers(1, 6)
)
def test_an_iterations_tasks_do_not_depend_on_where_the_run_resumed(tasks, count, seed, stop) -> None:
    from recreate.finetune.online_batches import tasks_of_iteration

    pool = [f"t{i}" for i in range(tasks)]
    uninterrupted, rng, order = [], random.Random(seed), list(pool)
    for _ in range(1, stop + 1):  # one process running iterations 1..stop
        rng.shuffle(order)
        uninterrupted.append((order * count)[:count])
    # each iteration alone, as a process resumed at it computes it
    assert [tasks_of_iteration(pool, seed, i, count) for i in range(1, stop + 1)] == uninterrupted
    assert all(set(chosen) <= set(pool) and len(chosen) == count for chosen in uninterrupted)
