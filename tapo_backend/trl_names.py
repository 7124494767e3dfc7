"""TRL `GRPOConfig` key names in a TrainConfig file: each is mapped to this project's setting, or refused
in one line that names the setting to use instead (or says why there is none).

`tapo` trains from logged agent runs: generation, rewards and the reference model's syncing are the
agent's and the logs' business, so TRL's sampling keys have no setting here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

RENAMES = {  # TRL name -> this project's (same meaning)
    "learning_rate": "lr",
    "per_device_train_batch_size": "micro_batch_size",
    "gradient_accumulation_steps": "grad_accumulation",
    "logging_steps": "log_every",
    "save_steps": "save_every",
    "save_total_limit": "keep_checkpoints",
}
LOSS_KEYS = {  # TRL name -> key of the `loss` table
    "epsilon": "clip_low",
    "epsilon_high": "clip_high",
    "beta": "kl_coef",
    "vllm_importance_sampling_cap": "tis_cap",
}
_SAMPLING = "sampling is the agent's; tapo trains on the runs it logged (online: tapo train --online)"
REFUSED = {  # TRL name -> what to use instead here
    "fp16": "precision takes fp32 or bf16 (mixed precision); dtype=fp16 loads fp16 weights",
    "delta": "no two-sided ratio cap here; loss.clip_ratio_c is the dual clip of negative advantages",
    "warmup_ratio": "warmup_steps takes a number of optimizer steps",
    "num_iterations": "passes over the same samples are `epochs` here",
    "num_generations": "a group is the logged runs of one task; min_group_size sets the smallest kept "
    "(online: --group-size)",
    "max_completion_length": "max_length caps the tokens of a whole trajectory",
    "max_prompt_length": "max_length caps the tokens of a whole trajectory",
    "mask_truncated_completions": "trajectories cut at max_length keep their head; nothing to mask",
    "vllm_importance_sampling_correction": "truncated importance sampling runs when the logs hold "
    "behaviour logprobs; loss.tis_cap bounds it",
    "reward_weights": "rewards are the logged scores: change them with the evaluator (--evaluator)",
    "sync_ref_model": "the KL reference (loss.kl_coef) is the model before any update",
    "ref_model_sync_steps": "the KL reference (loss.kl_coef) is the model before any update",
    "ref_model_mixup_alpha": "the KL reference (loss.kl_coef) is the model before any update",
    **{
        key: _SAMPLING
        for key in (
            "use_vllm", "vllm_mode", "vllm_server_base_url", "vllm_server_host", "vllm_server_port",
            "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size", "generation_batch_size",
            "steps_per_generation", "generation_kwargs", "top_p", "top_k", "min_p", "repetition_penalty",
            "use_transformers_paged", "cache_implementation", "log_completions", "num_completions_to_print",
        )
    },
}  # fmt: skip
ALGOS = {  # (loss_type, importance_sampling_level) -> algo
    ("grpo", "token"): "grpo",
    ("dapo", "token"): "dapo",
    ("dr_grpo", "token"): "dr_grpo",
    ("bnpo", "token"): "dapo",
    ("grpo", "sequence"): "gspo",
    ("grpo", "sequence_token"): "gspo_token",
}


class TRLKeyError(ValueError):
    """A TRL key this project has no setting for, or one given under both names."""


def from_trl(values: dict[str, Any]) -> dict[str, Any]:
    """`values` with TRL names replaced by this project's (nested `loss`/`lora` tables included)."""
    out = {k: v for k, v in values.items() if k not in _TRL_KEYS}
    loss = dict(out.get("loss") or {})
    for key, value in values.items():
        if key in REFUSED:
            raise TRLKeyError(f"{key} (a TRL key): {REFUSED[key]}")
        if key in RENAMES:
            _put(out, RENAMES[key], value, key)
        elif key in LOSS_KEYS:
            _put(loss, LOSS_KEYS[key], value, key, table="loss.")
        elif key in _CONVERTED:
            for name, converted in _CONVERTED[key](value, values).items():
                _put(loss if name.startswith("loss.") else out, name.removeprefix("loss."), converted, key)
    if "epsilon" in values and "epsilon_high" not in values:  # TRL: epsilon_high defaults to epsilon
        _put(loss, "clip_high", values["epsilon"], "epsilon", table="loss.")
    if loss:
        out["loss"] = loss
    return out


def _put(into: dict[str, Any], name: str, value: Any, trl_key: str, table: str = "") -> None:
    if name in into and into[name] != value:
        raise TRLKeyError(
            f"{trl_key} (TRL's name for {table}{name}) and {table}{name} are both set; keep one"
        )
    into[name] = value


def _algo(value: Any, values: dict[str, Any]) -> dict[str, Any]:
    loss_type = values.get("loss_type", "grpo")
    level = values.get("importance_sampling_level", "token")
    algo = ALGOS.get((loss_type, level))
    if algo is None:
        known = ", ".join(f"{t}+{lv}" for t, lv in ALGOS)
        raise TRLKeyError(
            f"loss_type={loss_type!r} with importance_sampling_level={level!r}: no algo matches "
            f"(known: {known}); set algo (grpo, dapo, dr_grpo, gspo, gspo_token, cumprod, tapo)"
        )
    return {"algo": algo}


def _epochs(value: Any, values: dict[str, Any]) -> dict[str, Any]:
    if not float(value).is_integer():
        raise TRLKeyError(
            f"num_train_epochs={value}: epochs takes whole passes; use max_steps for part of one"
        )
    return {"epochs": int(value)}


def _max_steps(value: Any, values: dict[str, Any]) -> dict[str, Any]:
    return {"max_steps": None if value == -1 else value}  # TRL's -1: no cap


def _bf16(value: Any, values: dict[str, Any]) -> dict[str, Any]:
    return {"precision": "bf16" if value else "fp32"}


def _scale_rewards(value: Any, values: dict[str, Any]) -> dict[str, Any]:
    if value in ("group", True):
        return {"advantage": "grpo"}
    if value in ("none", False):
        return {"advantage": "dr_grpo"}
    raise TRLKeyError(f"scale_rewards={value!r}: advantage takes grpo (group std), dr_grpo (none) or loo")


def _report_to(value: Any, values: dict[str, Any]) -> dict[str, Any]:
    targets = [value] if isinstance(value, str) else list(value or [])
    targets = [t for t in targets if t != "none"]
    if set(targets) - {"tensorboard"}:
        raise TRLKeyError(
            f"report_to={value!r}: metrics go to metrics.jsonl; tensorboard=true adds TensorBoard"
        )
    return {"tensorboard": bool(targets)}


def _scheduler(value: Any, values: dict[str, Any]) -> dict[str, Any]:
    if value in ("constant", "constant_with_warmup"):
        return {}
    raise TRLKeyError(
        f"lr_scheduler_type={value!r}: the rate warms up over warmup_steps, then stays constant"
    )


_CONVERTED: dict[str, Callable[[Any, dict[str, Any]], dict[str, Any]]] = {
    "loss_type": _algo,
    "importance_sampling_level": _algo,
    "num_train_epochs": _epochs,
    "max_steps": _max_steps,
    "bf16": _bf16,
    "scale_rewards": _scale_rewards,
    "report_to": _report_to,
    "lr_scheduler_type": _scheduler,
}
_TRL_KEYS = set(RENAMES) | set(LOSS_KEYS) | set(REFUSED) | set(_CONVERTED)
