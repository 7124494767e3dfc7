"""The `tapo` command line and the TrainConfig files it reads."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest

from tapo_backend import cli
from tapo_backend.config import ConfigError, LoraSettings, load_config

from .conftest import DROPS_OLD_REASONING, save_tiny_model, synthetic_trajectory


def run_tapo(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["tapo", *args])
    try:
        cli.main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_prints_the_dataset_summary(
    monkeypatch, capsys, recreate_home, tiny_model_dir, write_logs, tokenizer
) -> None:
    logs = write_logs(tasks=3, per_answer=2)
    (logs / "junk.json").write_text("{oops")
    code, out, _ = run_tapo(
        monkeypatch, capsys, "train", "--logs", str(logs), "--model", str(tiny_model_dir), "--dry-run"
    )
    assert code == 0
    assert "groups (tasks)" in out and "trajectories" in out and "mask ratio" in out
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in out.splitlines()
        if line.count("│") == 3
    }
    assert rows["groups (tasks)"] == "3" and rows["trajectories"] == "12" and rows["skipped"] == "1"
    assert rows["reward min .. max"] == "0 .. 1"
    assert "junk.json: unreadable" in out
    assert not (recreate_home / "tapo").exists()  # a dry run writes nothing


def test_dr_grpo_and_on_mismatch_from_the_command_line(
    monkeypatch, capsys, recreate_home, tiny_model_dir, write_logs
) -> None:
    logs = write_logs(tasks=2, per_answer=1)
    code, out, err = run_tapo(
        monkeypatch, capsys, "train", "--logs", str(logs), "--model", str(tiny_model_dir),
        "--algo", "dr_grpo", "--on-mismatch", "drop", "--dtype", "bf16", "--dry-run",
    )  # fmt: skip
    assert code == 0, err
    assert "ids ≠ text (turns)" in out and "raw logprobs under sampling" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--logs", "missing-dir"], "no such file or directory: missing-dir"),
        (["--algo", "ppo"], "algo must be one of"),
        (["--lr", "-1"], "lr must be > 0"),
        (["--on-mismatch", "ignore"], "on_mismatch must be one of trust, drop, retokenize"),
        (["--dtype", "int8"], "dtype must be one of"),
        (["--algo", "ctpo"], "'ctpo' is now 'cumprod'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    monkeypatch, capsys, recreate_home, tiny_model_dir, write_logs, args, message
) -> None:
    logs = write_logs(tasks=2, per_answer=1)
    base = {"--logs": str(logs), "--model": str(tiny_model_dir)}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    code, _, err = run_tapo(
        monkeypatch, capsys, "train", *[x for pair in base.items() for x in pair], "--dry-run"
    )
    assert code == 2
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--iterations", "0", "--online"], "Invalid value for '--iterations': Input should be greater"),
        (["--nope"], "No such option: --nope"),
        (["--max-steps", "many"], "Invalid value for '--max-steps'"),
    ],
)
def test_a_usage_error_names_the_option_in_one_line(monkeypatch, capsys, args, message) -> None:
    """A range error said "Input should be greater than or equal to 1" without naming the option."""
    code, _, err = run_tapo(monkeypatch, capsys, "train", *args)
    assert code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1


def test_no_usable_trajectories_is_exit_2(
    monkeypatch, capsys, recreate_home, tiny_model_dir, tmp_path
) -> None:
    for k in range(3):  # one group, all rewards equal: nothing to learn from
        synthetic_trajectory(0, "A", trajectory_id=f"same-{k}").save(tmp_path / "logs" / f"{k}.json")
    code, out, err = run_tapo(
        monkeypatch, capsys, "train", "--logs", str(tmp_path / "logs"), "--model", str(tiny_model_dir)
    )
    assert code == 2 and "no trainable trajectories" in err
    assert "all rewards equal" in out


def test_template_that_is_not_append_only_is_exit_2(monkeypatch, capsys, recreate_home, tmp_path) -> None:
    model = save_tiny_model(tmp_path / "thinking-model", chat_template=DROPS_OLD_REASONING)
    traj = synthetic_trajectory(0, "A")
    traj.messages[2]["content"] = "<think>plan</think>look"
    traj.save(tmp_path / "logs" / "t.json")
    code, _, err = run_tapo(
        monkeypatch, capsys, "train", "--logs", str(tmp_path / "logs"), "--model", str(model)
    )
    assert code == 2 and "not append-only" in err


def test_missing_model_is_exit_2(monkeypatch, capsys, recreate_home, write_logs) -> None:
    logs = write_logs(tasks=2, per_answer=1)
    code, _, err = run_tapo(
        monkeypatch, capsys, "train", "--logs", str(logs), "--model", "./no-such-model-dir"
    )
    assert code == 2 and err.startswith("error: ") and "no such model directory" in err


@pytest.mark.slow
def test_train_from_a_config_file(
    monkeypatch, capsys, recreate_home, tiny_model_dir, write_logs, tmp_path
) -> None:
    config = tmp_path / "run.toml"
    config.write_text(
        'algo = "grpo"\nlr = 1e-3\nmicro_batch_size = 2\ngrad_accumulation = 2\n'
        "[loss]\nclip_high = 0.3\n[lora]\nr = 4\nalpha = 8\n"
    )
    logs = write_logs(tasks=2, per_answer=2)
    code, out, err = run_tapo(
        monkeypatch,
        capsys,
        "train",
        "--logs",
        str(logs),
        "--model",
        str(tiny_model_dir),
        "--config",
        str(config),
        "--run-name",
        "first",
        "--algo",
        "tapo",
        "--max-steps",
        "2",
    )
    assert code == 0, err
    run_dir = recreate_home / "tapo" / "first"
    saved = json.loads((run_dir / "train_config.json").read_text())
    assert saved["algo"] == "tapo" and saved["loss"] == {"clip_high": 0.3} and saved["lora"]["r"] == 4
    assert (run_dir / "final" / "adapter_config.json").is_file()
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2
    assert "trained 2 steps" in out


def test_config_files_toml_and_yaml(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('[tapo]\nalgo = "dapo"\nepochs = 3\n[tapo.lora]\nr = 8\ntarget_modules = ["q_proj"]\n')
    config = load_config(toml, lr=2e-5)
    assert (config.algo, config.epochs, config.lr) == ("dapo", 3, 2e-5)
    assert config.lora == LoraSettings(r=8, alpha=32, dropout=0.0, target_modules=["q_proj"])
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("algo: dr_grpo\nadvantage: dr_grpo\nloss:\n  max_length: 512\n")
    assert load_config(yaml_file).loss == {"max_length": 512}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("algo = 'tapo'\noptim = 1\n", "unknown config key(s) optim; known: "),
        ("[lora]\nrank = 4\n", "unknown lora key(s) rank"),
        ("[loss]\nclip_lo = 0.1\n", "unknown loss config key(s) clip_lo"),
        # dr_grpo alone takes its max_length from the data; an explicit bad one is still an error
        ("algo = 'dr_grpo'\n[loss]\nmax_length = 0\n", "fixed-length' needs a positive max_length"),
        ("precision = 'fp16'\n", "precision must be one of fp32, bf16"),
        ("algo = [", "malformed TOML"),
    ],
)
def test_config_errors_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=None) as info:
        load_config(path)
    assert message in str(info.value)


def test_output_dir_defaults_under_recreate_home(recreate_home) -> None:
    config = load_config(run_name="r1")
    assert Path(config.output_dir) == recreate_home / "tapo" / "r1"


def test_serve_print_command_and_merge_errors(monkeypatch, capsys, tmp_path) -> None:
    code, out, _ = run_tapo(monkeypatch, capsys, "serve", "/m/merged", "--port", "9001", "--print-command")
    assert code == 0
    from recreate.local.vllm import GUARD, GUARD_DIR

    assert shlex.split(out) == [
        "env", f"PYTHONPATH={GUARD_DIR}", "python", "-m", "vllm.entrypoints.openai.api_server",
        "--model", "/m/merged", "--host", "127.0.0.1", "--port", "9001",
        "--allowed-origins", '["http://127.0.0.1:9001"]', "--middleware", GUARD,
    ]  # fmt: skip
    code, _, err = run_tapo(monkeypatch, capsys, "merge", str(tmp_path), str(tmp_path / "out"))
    assert code == 2 and "not a LoRA adapter" in err


def test_a_hub_model_offline_fails_at_once_in_one_line(
    monkeypatch, capsys, recreate_home, write_logs, tmp_path
) -> None:
    from huggingface_hub import constants

    logs = write_logs(tasks=2, per_answer=1)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    started = time.monotonic()
    code, _, err = run_tapo(
        monkeypatch, capsys, "train", "--logs", str(logs), "--model", "Qwen/Qwen3-0.6B", "--dry-run"
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "not in the Hugging Face cache" in err and "HF_HUB_OFFLINE" in err
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "https://hub.invalid")  # no network: DNS fails
    code, _, err = run_tapo(
        monkeypatch, capsys, "train", "--logs", str(logs), "--model", "Qwen/Qwen3-0.6B", "--dry-run"
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and "hub.invalid is unreachable" in err
    assert time.monotonic() - started < 15  # transformers' own retries took 60-80 s here
