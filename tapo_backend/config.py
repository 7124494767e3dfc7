"""TrainConfig: every knob of a `tapo train` run, loadable from TOML or YAML.

A config file holds the TrainConfig fields at its top level (or under a `[tapo]` table); `loss` is the
keyword dict passed to `compute_policy_loss` and `lora` a table of LoraSettings (absent = full fine-tune).
TRL `GRPOConfig` names are read as their TrainConfig settings (`tapo_backend.trl_names`). Unknown keys
are errors that name the known ones.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tapo_backend.logged import ON_MISMATCH
from tapo_backend.losses import LossConfigError
from tapo_backend.losses.config import LOSSES, RENAMED, resolve
from tapo_backend.trl_names import TRLKeyError, from_trl


class ConfigError(ValueError):
    """A bad training configuration; the message names the problem."""


ALGOS = ("grpo", "dapo", "dr_grpo", "gspo", "gspo_token", "cumprod", "tapo")
# Settings an algorithm's authors define with it; an explicit value in the config wins.
ALGO_DEFAULTS: dict[str, dict[str, Any]] = {
    "dr_grpo": {"advantage": "dr_grpo", "drop_zero_variance": False},
}
ADVANTAGES = ("grpo", "dr_grpo", "loo")
PRECISIONS = ("fp32", "bf16")
DTYPES = ("fp32", "bf16", "fp16", "auto")


@dataclass
class LoraSettings:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] | str = "all-linear"


@dataclass
class TrainConfig:
    algo: str = "tapo"
    loss: dict[str, Any] = field(default_factory=dict)  # compute_policy_loss keywords (clip_low, ...)
    # grpo (group-normalised), dr_grpo (no std), loo (leave-one-out); None = the algo's own (ALGO_DEFAULTS)
    advantage: str | None = None
    min_group_size: int = 2
    drop_zero_variance: bool | None = None  # None = the algo's own: dr_grpo keeps them in B, as TRL does
    recompute_old_logprobs: bool = False  # True: old = the model's at each iteration, logged ones feed TIS
    # tokens per trajectory; longer ones are cut (their tail is not trained); None = 8192 (DEFAULT_MAX_LENGTH)
    max_length: int | None = None
    temperature: float = 1.0  # the logs' sampling temperature: the policy trained is softmax(logits / T)
    lr: float = 1e-6
    weight_decay: float = 0.0
    warmup_steps: int = 0
    epochs: int = 1  # passes over the logged data; behaviour log-probs not in the logs are taken per pass
    max_steps: int | None = None  # optimizer steps; caps `epochs`
    micro_batch_size: int = 4  # trajectories per forward/backward on one device
    grad_accumulation: int = 1  # micro-batches per optimizer step (per device)
    max_grad_norm: float | None = 1.0
    precision: str = "fp32"  # autocast: fp32 (none) or bf16 mixed precision
    dtype: str = "fp32"  # weights as loaded: fp32, bf16, fp16, or auto (the checkpoint's own dtype)
    on_mismatch: str = "trust"  # logged ids that do not decode to their text: trust, drop, retokenize
    strict: bool = False  # a bad log file is an error instead of being skipped (see tapo_backend.load)
    gradient_checkpointing: bool = False
    lora: LoraSettings | None = None
    seed: int = 0
    run_name: str = ""  # default: a UTC timestamp
    output_dir: str = ""  # default: $RECREATE_HOME/tapo/<run_name>
    save_every: int = 0  # optimizer steps between checkpoints; 0 = only at the end
    keep_checkpoints: int | None = 1  # newest checkpoints kept (a resume needs one); 0 or None: all
    log_every: int = 1
    tensorboard: bool = False

    def __post_init__(self) -> None:
        own = {"advantage": "grpo", "drop_zero_variance": True, **ALGO_DEFAULTS.get(self.algo, {})}
        for name, value in own.items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if self.keep_checkpoints is None:  # TRL's save_total_limit = None: keep every one
            self.keep_checkpoints = 0
        if isinstance(self.lora, dict):
            self.lora = _build(LoraSettings, self.lora, "lora")
        if not self.run_name:
            self.run_name = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        if not self.output_dir:
            home = Path(os.environ.get("RECREATE_HOME") or ".recreate").expanduser()
            self.output_dir = str(home / "tapo" / self.run_name)
        self.validate()

    def validate(self) -> None:
        if self.algo in RENAMED:
            raise ConfigError(f"algo: {RENAMED[self.algo]}")
        _choice("algo", self.algo, ALGOS)
        _choice("advantage", self.advantage, ADVANTAGES)
        _choice("precision", self.precision, PRECISIONS)
        _choice("dtype", self.dtype, DTYPES)
        _choice("on_mismatch", self.on_mismatch, ON_MISMATCH)
        for name in ("micro_batch_size", "grad_accumulation", "epochs", "min_group_size", "log_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        keep = self.keep_checkpoints
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ConfigError(f"keep_checkpoints must be a whole number >= 0 (0: every one), got {keep!r}")
        if self.temperature <= 0:
            raise ConfigError(f"temperature must be > 0, got {self.temperature}")
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if self.max_length is not None and self.max_length < 2:
            raise ConfigError(f"max_length must be >= 2 tokens or unset, got {self.max_length}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"max_steps must be >= 1 or unset, got {self.max_steps}")
        if not isinstance(self.loss, dict):
            raise ConfigError("loss must be a table of compute_policy_loss options")
        try:
            resolve(self.algo, **self.loss_options())
        except (LossConfigError, TypeError) as exc:
            raise ConfigError(f"loss: {exc}") from exc

    def loss_options(self, longest_model_span: int | None = None) -> dict[str, Any]:
        """`loss` plus what the algo needs and the config implies: Dr.GRPO's constant `max_length` is
        `loss.max_length`, else `max_length`, else the data's longest model-token span (fixed per run)."""
        options = dict(self.loss)
        aggregation = options.get("aggregation", LOSSES[self.algo].defaults.get("aggregation"))
        if aggregation == "fixed-length" and "max_length" not in options:
            options["max_length"] = self.max_length or longest_model_span or 1
        return options

    @property
    def batch_size(self) -> int:
        """Trajectories per optimizer step on one device."""
        return self.micro_batch_size * self.grad_accumulation

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def _build(cls: type, values: dict[str, Any], where: str) -> Any:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown {where} key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    try:
        return cls(**values)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def load_config(path: str | Path | None = None, **overrides: Any) -> TrainConfig:
    """TrainConfig from a TOML/YAML file (optional) with keyword overrides on top (None = not given)."""
    values: dict[str, Any] = {}
    if path is not None:
        values.update(read_config_file(Path(path)))
    values.update({k: v for k, v in overrides.items() if v is not None})
    return _build(TrainConfig, values, "config")


def read_config_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text) or {}
        else:
            raise ConfigError(f"{path}: config files are .toml, .yaml or .yml")
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(
            f"{path}: malformed {path.suffix[1:].upper()} ({' '.join(str(exc).split())})"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a table of settings at the top level")
    try:
        return from_trl(data.get("tapo", data))
    except TRLKeyError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def command_config(
    defaults: dict[str, Any], settings: dict[str, Any], command: str, **fixed: Any
) -> TrainConfig:
    """The TrainConfig of a command that trains (`recreate finetune`, evolve's fine-tuning step): its
    `defaults`, under the user's `settings` (a --config file with the options given on top), under what
    the command itself sets (`fixed`: paths, the logs' temperature; refused in the settings). LoRA's
    alpha follows r (2r) unless set; epochs follow max_steps unless set in either (the steps are reached)."""
    clash = sorted(set(settings) & set(fixed))
    if clash:
        raise ConfigError(f"{', '.join(clash)}: set by {command} itself; remove it from the --config file")
    values = {**defaults, **settings, **fixed}
    lora = {**(defaults.get("lora") or {}), **(settings.get("lora") or {})}
    if lora:
        values["lora"] = {"alpha": 2 * lora.get("r", LoraSettings.r), **lora}
    if "epochs" not in settings and "epochs" not in defaults and values.get("max_steps"):
        values["epochs"] = values["max_steps"]
    return _build(TrainConfig, values, "config")


def settings_file(path: Path | None) -> dict[str, Any]:
    """The settings of a --config file (TRL names mapped), checked now: a bad key fails before any run."""
    if path is None:
        return {}
    values = read_config_file(path)
    try:
        _build(TrainConfig, values, "config")
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return values
