"""Float64 identities of the state-corrected losses, checked against explicit loops, and the baselines
as their authors define them (Dr.GRPO alone, `min` σ, the renamed cumulative loss).

The E1 identity (the cumulative-prefix estimator is exactly unbiased for g*) lives in test_synthetic.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from tapo_backend.config import ConfigError, TrainConfig
from tapo_backend.losses import LossConfigError, compute_policy_loss, state_correction

F64 = torch.float64
WIDE = {"clip_low": 0.99, "clip_high": 1e6, "clip_ratio_c": None}  # nothing clips


def sample(seed: int = 0, b: int = 3, t: int = 10):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=gen, dtype=F64) * 2
    lp = old + 0.4 * torch.randn(b, t, generator=gen, dtype=F64)
    mask = torch.rand(b, t, generator=gen) > 0.35
    mask[:, 1] = True
    adv = torch.randn(b, t, generator=gen, dtype=F64)
    return lp, old, adv, mask


def sigma_by_loop(delta: torch.Tensor, mask: torch.Tensor, mode: str, power: float = 0.5) -> torch.Tensor:
    out = torch.zeros_like(delta)
    for i in range(delta.shape[0]):
        earlier: list[float] = []
        for t in range(delta.shape[1]):
            if earlier:
                total, n = math.fsum(earlier), len(earlier)
                out[i, t] = {
                    "geo": total / n,
                    "cum": total,
                    "pow": total / n**power,
                    "min": min(0.0, min(earlier)),
                    "none": 0.0,
                }[mode]
            if mask[i, t]:
                earlier.append(float(delta[i, t]))
    return out


@pytest.mark.parametrize("mode", ["geo", "cum", "pow", "min", "none"])
def test_sigma_matches_its_definition_over_earlier_model_tokens(mode):
    lp, old, _, mask = sample(seed=1)
    delta = torch.where(mask, lp - old, torch.zeros_like(lp))
    torch.testing.assert_close(
        state_correction(delta, mask, mode, 0.7), sigma_by_loop(delta, mask, mode, 0.7), rtol=0, atol=1e-14
    )


def test_cum_weight_is_the_prefix_product_of_model_token_ratios_and_pow_interpolates():
    lp, old, _, mask = sample(seed=2)
    delta = torch.where(mask, lp - old, torch.zeros_like(lp))
    cum = state_correction(delta, mask, "cum")
    for i in range(lp.shape[0]):
        product = 1.0
        for t in range(lp.shape[1]):
            assert math.exp(cum[i, t]) == pytest.approx(product, rel=1e-13)
            if mask[i, t]:
                product *= math.exp(lp[i, t] - old[i, t])  # tool tokens (mask 0) cancel: no factor
    torch.testing.assert_close(
        state_correction(delta, mask, "pow", 1.0), state_correction(delta, mask, "geo")
    )
    torch.testing.assert_close(state_correction(delta, mask, "pow", 0.0), cum)


@pytest.mark.parametrize("mode", ["geo", "cum", "pow", "min"])
def test_gradient_form_is_stopgrad_weight_times_token_ratio(mode):
    """Unclipped, ∂L/∂log π_t = −Â_t w_t exp(σ_t) r_t with σ_t held fixed (token-mean: w = 1/N)."""
    lp, old, adv, mask = sample(seed=3)
    leaf = lp.clone().requires_grad_(True)
    loss, _ = compute_policy_loss("tapo", leaf, old, adv, mask, state_correction=mode, **WIDE)
    (grad,) = torch.autograd.grad(loss, leaf)
    delta = torch.where(mask, lp - old, torch.zeros_like(lp))
    sigma = sigma_by_loop(delta, mask, mode)
    expected = torch.where(mask, -adv * torch.exp(sigma + delta) / mask.sum(), torch.zeros_like(lp))
    torch.testing.assert_close(grad, expected, rtol=1e-13, atol=1e-15)
    # the loss value is the same surrogate: −Σ Â exp(σ + δ) / N
    value = -(torch.where(mask, adv * torch.exp(sigma + delta), torch.zeros_like(lp))).sum() / mask.sum()
    assert float(loss.detach()) == pytest.approx(float(value), rel=1e-13)


def test_gspo_ratio_is_the_geometric_mean_and_its_gradient_spreads_over_the_sequence():
    lp, old, _, mask = sample(seed=4)
    adv = torch.tensor([0.7, -1.2, 0.4], dtype=F64)
    leaf = lp.clone().requires_grad_(True)
    loss, _ = compute_policy_loss("gspo", leaf, old, adv, mask, clip_low=0.99, clip_high=1e6)
    (grad,) = torch.autograd.grad(loss, leaf)
    n = mask.sum(1, keepdim=True).to(F64)
    s = torch.exp(torch.where(mask, lp - old, torch.zeros_like(lp)).sum(1, keepdim=True) / n)
    sequences = lp.shape[0]
    # seq-mean-token-mean of a per-sequence value: L = −Σ_i Â_i s_i / B; ∂s_i/∂lp_it = s_i / n_i
    expected = torch.where(mask, -adv[:, None] * s / n / sequences, torch.zeros_like(lp))
    torch.testing.assert_close(grad, expected, rtol=1e-13, atol=1e-15)


def test_min_correction_never_raises_the_weight():
    lp, old, adv, mask = sample(seed=5)
    lp = old + 0.3  # every earlier ratio above 1: a min over them would be positive without min(0, ·)
    delta = torch.where(mask, lp - old, torch.zeros_like(lp))
    assert torch.all(state_correction(delta, mask, "min") == 0)
    assert torch.all(state_correction(-delta, mask, "min") <= 0)


def test_ctpo_is_renamed_with_a_reason():
    lp, old, adv, mask = sample()
    with pytest.raises(LossConfigError, match="'ctpo' is now 'cumprod'.*CTPO-LA"):
        compute_policy_loss("ctpo", lp, old, adv, mask)
    with pytest.raises(ConfigError, match="cumprod"):
        TrainConfig(algo="ctpo", output_dir="x")
    loss, _ = compute_policy_loss("cumprod", lp, old, adv, mask)
    assert torch.isfinite(loss)


def test_dr_grpo_runs_alone_with_its_own_advantages_and_batch():
    config = TrainConfig(algo="dr_grpo", output_dir="x")
    assert config.advantage == "dr_grpo" and config.drop_zero_variance is False
    assert config.loss_options(longest_model_span=37)["max_length"] == 37
    assert TrainConfig(algo="dr_grpo", max_length=64, output_dir="x").loss_options(37)["max_length"] == 64
    explicit = TrainConfig(algo="dr_grpo", loss={"max_length": 9}, advantage="grpo", output_dir="x")
    assert explicit.loss_options(37)["max_length"] == 9 and explicit.advantage == "grpo"
    # other algorithms keep the group-normalised advantages and drop zero-variance groups
    tapo = TrainConfig(algo="tapo", output_dir="x")
    assert tapo.advantage == "grpo" and tapo.drop_zero_variance is True
    assert "max_length" not in tapo.loss_options(37)
