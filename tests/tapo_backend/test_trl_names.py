"""TRL GRPOConfig key names in a --config file: mapped to this project's settings, or refused in one
line naming the setting to use."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from recreate.finetune.cli import given_settings
from recreate.finetune.offline import train_config
from tapo_backend.config import ConfigError, LoraSettings, TrainConfig, load_config, settings_file
from tapo_backend.losses.config import LossConfig
from tapo_backend.trl_names import LOSS_KEYS, REFUSED, RENAMES

FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}
LOSS_FIELDS = {f.name for f in dataclasses.fields(LossConfig)}


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_trl_config_reads_as_ours(tmp_path):
    cfg = load_config(
        write(
            tmp_path,
            "learning_rate: 3.0e-6\nper_device_train_batch_size: 2\ngradient_accumulation_steps: 4\n"
            "num_train_epochs: 2\nmax_steps: -1\nepsilon: 0.1\nbeta: 0.04\nloss_type: dr_grpo\n"
            "scale_rewards: none\nbf16: true\nreport_to: [tensorboard]\nlogging_steps: 5\nseed: 7\n",
        )
    )
    assert (cfg.lr, cfg.micro_batch_size, cfg.grad_accumulation, cfg.epochs) == (3e-6, 2, 4, 2)
    assert cfg.max_steps is None and cfg.algo == "dr_grpo" and cfg.advantage == "dr_grpo"
    assert cfg.loss == {"clip_low": 0.1, "clip_high": 0.1, "kl_coef": 0.04}  # epsilon_high = epsilon, as TRL
    assert (cfg.precision, cfg.tensorboard, cfg.log_every, cfg.seed) == ("bf16", True, 5, 7)


@pytest.mark.parametrize(
    ("loss_type", "level", "algo"),
    [("grpo", "token", "grpo"), ("dapo", "token", "dapo"), ("grpo", "sequence", "gspo")],
)
def test_loss_type_and_level_choose_the_algo(tmp_path, loss_type, level, algo):
    text = f"loss_type: {loss_type}\nimportance_sampling_level: {level}\n"
    assert load_config(write(tmp_path, text)).algo == algo


def test_every_mapped_name_lands_on_a_real_setting():
    assert set(RENAMES.values()) <= FIELDS
    assert set(LOSS_KEYS.values()) <= LOSS_FIELDS


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_each_refused_key_is_one_line_naming_what_to_use(tmp_path, key):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, f"{key}: 1\n"))
    message = str(err.value)
    assert "\n" not in message and str(tmp_path) in message and key in message
    named = {w.strip("`.,;:()") for w in message.replace("=", " ").split()}
    assert named & (
        FIELDS | {f"loss.{f}" for f in LOSS_FIELDS} | {"--group-size", "--online", "--evaluator"}
    ), message


def test_both_names_at_once_is_refused_naming_both(tmp_path):
    with pytest.raises(ConfigError, match=r"learning_rate \(TRL's name for lr\) and lr are both set"):
        load_config(write(tmp_path, "learning_rate: 1.0e-5\nlr: 2.0e-5\n"))
    with pytest.raises(ConfigError, match="loss_type"):
        load_config(write(tmp_path, "loss_type: bnpo\nimportance_sampling_level: sequence\n"))


def test_unknown_keys_still_list_the_known_ones(tmp_path):
    with pytest.raises(ConfigError, match="unknown config key.*optim.*known: .*lr"):
        load_config(write(tmp_path, "optim: adamw_torch\n"))


def test_finetune_options_win_over_the_file_which_wins_over_defaults(tmp_path):
    file = settings_file(write(tmp_path, "learning_rate: 3.0e-5\nper_device_train_batch_size: 1\n"))
    settings = given_settings(file, lora_r=4, algo="grpo", max_steps=None, lr=None)
    config = train_config(tmp_path / "run", 0.7, settings)
    assert (config.lr, config.micro_batch_size, config.algo, config.max_steps) == (3e-5, 1, "grpo", 20)
    assert config.lora == LoraSettings(r=4, alpha=8) and config.temperature == 0.7
    assert train_config(tmp_path, 0.7, given_settings(file, lr=1e-3)).lr == 1e-3
    with pytest.raises(ConfigError, match="temperature: set by recreate finetune itself"):
        train_config(tmp_path, 0.7, given_settings({"temperature": 1.0}))


@pytest.mark.parametrize(("limit", "kept"), [("null", 0), ("3", 3)])
def test_save_total_limit_is_how_many_checkpoints_stay(tmp_path, limit, kept) -> None:
    assert load_config(write(tmp_path, f"save_total_limit: {limit}\n")).keep_checkpoints == kept


@pytest.mark.parametrize("value", ["2.5", "-1", "true"])
def test_a_bad_keep_checkpoints_is_refused_in_one_line(tmp_path, value) -> None:
    with pytest.raises(ConfigError, match=r"keep_checkpoints must be") as error:
        load_config(write(tmp_path, f"keep_checkpoints: {value}\n"))
    assert "\n" not in str(error.value)
