"""Policy losses for RL from logged trajectories: one registry, one call.

    loss, metrics = compute_policy_loss("tapo", logprobs, old_logprobs, advantages, mask, clip_exponent=-0.5)

`LOSSES` maps each name (grpo, dapo, dr_grpo, gspo, gspo_token, cumprod, tapo) to its ratio kind and
defaults; config keys are the fields of `LossConfig`.

TAPO vs cumprod (formerly `ctpo`): both weight token t by a stop-gradient estimate σ_t of the log
state-distribution ratio built from the earlier model tokens (tool/environment tokens cancel),
log r̃_t = sg(σ_t) + log(π/μ)_t, with gradient only through token t. cumprod uses the cumulative sum
σ_t = Σ_{j<t} (so r̃_t is the prefix product of ratios up to t) with a log window growing like
sqrt(position); its variance grows with t and it drifts like -KL·t off-policy. TAPO (default) uses
the geometric mean σ_t = mean_{j<t}, whose scale does not grow with t, and a position/length-scaled
window (p=0: DAPO's window) plus a dual clip.
"""

from .config import CONFIG_KEYS, LOSSES, LossConfig, LossConfigError, PolicyLoss
from .core import aggregation_weights, compute_policy_loss, loss_normalizer, state_correction

__all__ = [
    "CONFIG_KEYS",
    "LOSSES",
    "LossConfig",
    "LossConfigError",
    "PolicyLoss",
    "aggregation_weights",
    "compute_policy_loss",
    "loss_normalizer",
    "state_correction",
]
