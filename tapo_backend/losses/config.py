"""Loss configuration and the registry of named policy losses.

Every loss in the registry is the same clipped surrogate with a different *ratio* and different
defaults, so variants can be compared on the same batches by changing one name or one flag.
The public config keys (keep these names) are the fields of `LossConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "fixed-length")
STATE_CORRECTIONS = ("geo", "cum", "pow", "min", "none")
CLIP_SCHEDULES = ("none", "position", "length")
KL_ESTIMATORS = ("k1", "k3")

RatioKind = Literal["state", "sequence", "sequence-token"]


class LossConfigError(ValueError):
    """A loss name or config key/value is wrong; the message lists the valid choices."""


@dataclass(frozen=True)
class LossConfig:
    """Public loss settings.

    clip_low, clip_high: ε_lo, ε_hi of the window [log(1-ε_lo)·g, log(1+ε_hi)·g] on the log-ratio.
    clip_ratio_c: dual-clip constant c (>1) bounding the loss of tokens with Â<0 at -Â·c; None = off.
    aggregation: how per-token losses become one number (see `core.aggregation_weights`);
        `fixed-length` (Dr.GRPO) divides the token sum by B × `max_length`, B the sequences of the whole
        batch (all micro-batches and processes; the trainer keeps zero-advantage groups in it, as TRL).
    state_correction: estimate σ_t of the log state-distribution ratio from the earlier model tokens
        j<t: `geo` mean, `cum` sum, `pow` sum / n_{<t}^state_power, `min` min(0, smallest) (it only
        ever down-weights), `none` zero.
    clip_schedule, clip_exponent, length_ref: the window scale g = (n_{<t}+1)^p (`position`),
        (L/L_ref)^p with L the sequence's model-token count (`length`), or 1 (`none`); p=0 gives g=1.
    kl_coef, kl_estimator: per-token KL penalty to `ref_logprobs` (k1 = log π - log ref,
        k3 = ref/π - log(ref/π) - 1).
    tis_cap: truncated importance sampling for a behaviour/trainer mismatch. When `behavior_logprobs`
        (log μ of the engine that sampled, e.g. vLLM) are passed, each token's loss is multiplied by
        min(exp(old_logprobs - behavior_logprobs), tis_cap) (no gradient); None = untruncated.
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    clip_ratio_c: float | None = None
    aggregation: str = "token-mean"
    max_length: int | None = None
    state_correction: str = "none"
    state_power: float = 0.5
    clip_schedule: str = "none"
    clip_exponent: float = 0.0
    length_ref: float | None = None
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    tis_cap: float | None = 2.0

    def __post_init__(self) -> None:
        _choice("aggregation", self.aggregation, AGGREGATIONS)
        _choice("state_correction", self.state_correction, STATE_CORRECTIONS)
        _choice("clip_schedule", self.clip_schedule, CLIP_SCHEDULES)
        _choice("kl_estimator", self.kl_estimator, KL_ESTIMATORS)
        if not 0.0 <= self.clip_low < 1.0:
            raise LossConfigError(f"clip_low must be in [0, 1), got {self.clip_low}")
        if self.clip_high < 0.0:
            raise LossConfigError(f"clip_high must be >= 0, got {self.clip_high}")
        if self.clip_ratio_c is not None and self.clip_ratio_c <= 1.0:
            raise LossConfigError(f"clip_ratio_c must be > 1 (or None to disable), got {self.clip_ratio_c}")
        if self.aggregation == "fixed-length" and (self.max_length is None or self.max_length <= 0):
            raise LossConfigError("aggregation 'fixed-length' needs a positive max_length")
        if self.clip_schedule == "length" and (self.length_ref is None or self.length_ref <= 0):
            raise LossConfigError("clip_schedule 'length' needs a positive length_ref (L_ref)")
        if self.kl_coef < 0.0:
            raise LossConfigError(f"kl_coef must be >= 0, got {self.kl_coef}")
        if self.tis_cap is not None and self.tis_cap <= 0.0:
            raise LossConfigError(f"tis_cap must be > 0 (or None), got {self.tis_cap}")


def _choice(key: str, value: Any, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise LossConfigError(f"{key}={value!r} is not one of {', '.join(valid)}")


CONFIG_KEYS = tuple(f.name for f in fields(LossConfig))


@dataclass(frozen=True)
class PolicyLoss:
    """A named loss: which ratio it uses and its default settings.

    ratio `state`: log r̃_t = sg(σ_t) + (log π - log μ)_t, gradient only through token t (grpo/dapo/
        dr_grpo have σ=0; tapo and cumprod differ only in σ and the clip schedule).
    ratio `sequence`: GSPO's s_i = exp(mean_t (log π - log μ)) for every token, gradient through all.
    ratio `sequence-token`: GSPO-token, sg(s_i)·π_t/sg(π_t): value s_i, gradient through token t.
    """

    name: str
    ratio: RatioKind
    defaults: dict[str, Any]
    summary: str

    def config(self, **overrides: Any) -> LossConfig:
        unknown = sorted(set(overrides) - set(CONFIG_KEYS))
        if unknown:
            raise LossConfigError(
                f"unknown loss config key(s) {', '.join(unknown)} for {self.name!r}; "
                f"valid keys: {', '.join(CONFIG_KEYS)}"
            )
        cfg = LossConfig(**{**self.defaults, **overrides})
        if self.ratio != "state" and cfg.state_correction != "none":
            raise LossConfigError(f"{self.name} uses a sequence ratio; state_correction must be 'none'")
        return cfg


LOSSES: dict[str, PolicyLoss] = {
    loss.name: loss
    for loss in (
        PolicyLoss(
            "grpo",
            "state",
            dict(aggregation="seq-mean-token-mean"),
            "token ratio, symmetric clip, per-sequence mean (Shao et al. 2024)",
        ),
        PolicyLoss(
            "dapo",
            "state",
            dict(clip_high=0.28),
            "token ratio, clip-higher window, token mean (Yu et al. 2025)",
        ),
        PolicyLoss(
            "dr_grpo",
            "state",
            dict(aggregation="fixed-length"),
            "token ratio, token sum / max_length (Liu et al. 2025); use no-std advantages",
        ),
        PolicyLoss(
            "gspo",
            "sequence",
            dict(clip_low=3e-4, clip_high=4e-4, aggregation="seq-mean-token-mean"),
            "sequence geometric-mean ratio (Zheng et al. 2025)",
        ),
        PolicyLoss(
            "gspo_token",
            "sequence-token",
            dict(clip_low=3e-4, clip_high=4e-4, aggregation="seq-mean-token-mean"),
            "GSPO-token: sequence ratio value, per-token gradient",
        ),
        PolicyLoss(
            "cumprod",
            "state",
            dict(clip_high=0.28, state_correction="cum", clip_schedule="position", clip_exponent=0.5),
            "cumulative prefix ratio prod_{j<=t} r_j, log clip scaled by sqrt(position)",
        ),
        PolicyLoss(
            "tapo",
            "state",
            dict(
                clip_high=0.28,
                clip_ratio_c=3.0,
                state_correction="geo",
                clip_schedule="position",
                clip_exponent=0.0,
            ),
            "geo-mean state correction of earlier model tokens, length-aware log clip",
        ),
    )
}


# Names that left the registry, with why: a config naming one fails with this line, not "unknown".
RENAMED = {
    "ctpo": "'ctpo' is now 'cumprod': it is the cumulative prefix ratio with a sqrt(position) log "
    "window, not CTPO-LA's window and position-scaled dual clip as its paper defines them",
}


def resolve(name: str, **overrides: Any) -> tuple[PolicyLoss, LossConfig]:
    """The registry entry for `name` and its config with `overrides` applied (validated)."""
    if name in RENAMED:
        raise LossConfigError(RENAMED[name])
    if name not in LOSSES:
        raise LossConfigError(f"unknown loss {name!r}; valid: {', '.join(LOSSES)}")
    loss = LOSSES[name]
    return loss, loss.config(**overrides)
