"""TAPO's policy loss in verl's policy-loss registry, so a verl PPO/GRPO run selects it by name.

    import tapo_backend.integrations.verl  # in the actor workers' process, before the actor is built
    # then: actor_rollout_ref.actor.policy_loss.loss_mode=tapo (verl's FSDP/Megatron actors look it up)

Importing this module registers `tapo` (and `tapo_cum`, the cumulative-prefix σ) with verl's
`register_policy_loss`. The function has verl's policy-loss signature; it takes verl's clip window
(clip_ratio / clip_ratio_low / clip_ratio_high, clip_ratio_c) from the actor config and TAPO's own
settings (σ, position clip) from the registry entry, and it honours verl's global-batch normalisation
(`config.global_batch_info`: dp_size, batch_num_tokens, global_batch_size) so data parallelism and
micro-batching do not change the loss. verl's rollout correction weights multiply each token's loss.

`register(name, **loss_overrides)` registers a variant under another name (any `compute_policy_loss`
option, e.g. `register("tapo_p05", clip_exponent=-0.5)`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tapo_backend.losses import compute_policy_loss

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


def _option(config: Any, name: str, default: Any = None) -> Any:
    value = config.get(name, default) if hasattr(config, "get") else getattr(config, name, default)
    return default if value is None else value


def make_policy_loss(**loss_overrides: Any) -> Callable[..., tuple[Tensor, dict[str, Any]]]:
    """A verl policy-loss function computing `compute_policy_loss("tapo", ..., **loss_overrides)`."""

    def tapo_policy_loss(
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, Any]]:
        if config is None:
            raise ValueError("tapo policy loss: verl passes the actor config; got None")
        if loss_agg_mode not in AGGREGATIONS:
            raise ValueError(
                f"tapo policy loss: loss_agg_mode {loss_agg_mode!r} is not one of {AGGREGATIONS}"
            )
        clip = _option(config, "clip_ratio", 0.2)
        options: dict[str, Any] = {
            "clip_low": _option(config, "clip_ratio_low", clip),
            "clip_high": _option(config, "clip_ratio_high", clip),
            "clip_ratio_c": _option(config, "clip_ratio_c", 3.0),
            "aggregation": loss_agg_mode,
            **loss_overrides,
        }
        info = dict(_option(config, "global_batch_info", {}) or {})
        dp_size = info.get("dp_size", 1)
        # verl's agg_loss: local sum / (global count) × dp_size, so N = global count / dp_size
        total = (
            info.get("batch_num_tokens") if loss_agg_mode == "token-mean" else info.get("global_batch_size")
        )
        normalizer = None if total is None else float(total) / dp_size
        extra: dict[str, Any] = {}
        if rollout_is_weights is not None:  # as behaviour log-probs whose untruncated TIS weight is them
            extra["behavior_logprobs"] = old_log_prob - torch.log(rollout_is_weights.clamp(min=1e-30))
            options["tis_cap"] = None
        loss, metrics = compute_policy_loss(
            "tapo",
            log_prob,
            old_log_prob,
            advantages,
            response_mask,
            normalizer=normalizer,
            **extra,
            **options,
        )
        out = {
            "actor/pg_clipfrac": metrics["clip_frac"],
            "actor/ppo_kl": metrics["kl_mu_pi"],
            "actor/pg_clipfrac_lower": metrics["dual_clip_frac"],
        }
        out.update({f"actor/tapo/{k}": v for k, v in metrics.items() if k not in ("loss", "normalizer")})
        return loss, out

    return tapo_policy_loss


def register(name: str, **loss_overrides: Any) -> Callable[..., tuple[Tensor, dict[str, Any]]]:
    """Register a TAPO variant with verl under `name`; returns the registered function."""
    try:
        from verl.trainer.ppo.core_algos import register_policy_loss
    except ImportError as exc:
        raise ImportError(f"registering with verl needs verl installed (pip install verl): {exc}") from exc
    return register_policy_loss(name)(make_policy_loss(**loss_overrides))


VARIANTS = {"tapo": {}, "tapo_cum": {"state_correction": "cum"}}
try:  # in verl's environment, importing this module is the registration
    import verl.trainer.ppo.core_algos  # noqa: F401
except ImportError:  # elsewhere the functions stay usable (and testable) without verl
    REGISTERED: dict[str, Callable[..., Any]] = {}
else:
    REGISTERED = {name: register(name, **overrides) for name, overrides in VARIANTS.items()}
