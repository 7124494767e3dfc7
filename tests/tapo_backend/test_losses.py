"""Properties of the policy-loss registry (float64, small tensors)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tapo_backend.losses import (
    CONFIG_KEYS,
    LOSSES,
    LossConfigError,
    compute_policy_loss,
    loss_normalizer,
    state_correction,
)

F64 = torch.float64
AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "fixed-length")
# Every registered loss plus TAPO variants that exercise all σ modes and clip schedules.
CASES = [(name, {}) for name in LOSSES] + [
    ("tapo", {"state_correction": "cum", "clip_exponent": 0.5}),
    ("tapo", {"state_correction": "pow", "state_power": 0.7, "clip_exponent": -0.5}),
    ("tapo", {"state_correction": "min", "clip_schedule": "length", "length_ref": 4.0, "clip_exponent": 0.5}),
]
CASE_IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in c.items())}" for n, c in CASES]


def with_defaults(name: str, config: dict, max_length: int = 16) -> dict:
    """dr_grpo (fixed-length) needs a max_length."""
    return {"max_length": max_length, **config} if name == "dr_grpo" else dict(config)


def batch(seed: int = 0, b: int = 4, t: int = 9, scale: float = 0.3, per_token_adv: bool = False):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=gen, dtype=F64) * 3
    lp = (old + scale * torch.randn(b, t, generator=gen, dtype=F64)).requires_grad_(True)
    mask = torch.rand(b, t, generator=gen) > 0.3
    mask[:, 0] = True
    shape = (b, t) if per_token_adv else (b,)
    adv = torch.randn(*shape, generator=gen, dtype=F64)
    return lp, old, adv, mask


def loss_and_grad(name, lp, old, adv, mask, **kw):
    lp = lp.detach().clone().requires_grad_(True)
    loss, metrics = compute_policy_loss(name, lp, old, adv, mask, **kw)
    (grad,) = torch.autograd.grad(loss, lp, allow_unused=True)
    return loss.detach(), torch.zeros_like(lp) if grad is None else grad, metrics


def expected_weights(mask: torch.Tensor, aggregation: str, max_length: int) -> torch.Tensor:
    m = mask.to(F64)
    n = m.sum(1, keepdim=True)
    sequences = float((n > 0).sum())
    if aggregation == "token-mean":
        return m / m.sum()
    if aggregation == "seq-mean-token-mean":
        return m / n.clamp(min=1) / sequences
    if aggregation == "seq-mean-token-sum":
        return m / sequences
    return m / (sequences * max_length)


@pytest.mark.parametrize(("name", "config"), CASES, ids=CASE_IDS)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_on_policy_gradient_is_minus_advantage_times_weight(name, config, aggregation):
    lp, _, adv, mask = batch(per_token_adv=not LOSSES[name].ratio.startswith("sequence"))
    cfg = {**config, "aggregation": aggregation, "max_length": 16}
    _, grad, metrics = loss_and_grad(name, lp, lp.detach(), adv, mask, **cfg)
    a = adv if adv.dim() == 2 else adv[:, None].expand_as(lp)
    torch.testing.assert_close(grad, -a * expected_weights(mask, aggregation, 16))
    assert metrics["clip_frac"] == 0.0 and abs(metrics["kl_mu_pi"]) < 1e-12


@pytest.mark.parametrize("name", ["grpo", "dapo"])
def test_single_token_sequences_make_tapo_equal_grpo_and_dapo(name):
    lp, old, adv, _ = batch(t=1, b=16, scale=0.5)
    mask = torch.ones_like(lp, dtype=torch.bool)
    ref = loss_and_grad(name, lp, old, adv, mask)
    window = {"clip_low": 0.2, "clip_high": LOSSES[name].config().clip_high}
    aggregation = LOSSES[name].config().aggregation
    for correction in ("geo", "cum", "pow", "min"):
        got = loss_and_grad(
            "tapo",
            lp,
            old,
            adv,
            mask,
            state_correction=correction,
            clip_ratio_c=None,
            clip_exponent=0.5,
            aggregation=aggregation,
            **window,
        )
        torch.testing.assert_close(got[0], ref[0])
        torch.testing.assert_close(got[1], ref[1])


def insert_columns(x: torch.Tensor, before: list[int], values: torch.Tensor) -> torch.Tensor:
    """Insert values[:, i] in front of original column before[i] (== width: append)."""
    cols = []
    for k in range(x.shape[1] + 1):
        cols += [values[:, i] for i, b in enumerate(before) if b == k]
        if k < x.shape[1]:
            cols.append(x[:, k])
    return torch.stack(cols, dim=1)


@settings(max_examples=15, deadline=None)
@given(
    before=st.lists(st.integers(0, 9), min_size=1, max_size=4),
    seed=st.integers(0, 1000),
    case=st.sampled_from(range(len(CASES))),
)
def test_tool_tokens_anywhere_change_nothing(before, seed, case):
    name, config = CASES[case]
    config = with_defaults(name, config)
    lp, old, adv, mask = batch(seed=seed, t=9, per_token_adv=True)
    gen = torch.Generator().manual_seed(seed)
    junk = lambda: 100 * torch.randn(lp.shape[0], len(before), generator=gen, dtype=F64)  # noqa: E731
    base_loss, base_grad, base_metrics = loss_and_grad(name, lp, old, adv, mask, **config)
    lp2 = insert_columns(lp.detach(), before, junk())
    old2 = insert_columns(old, before, junk())
    adv2 = insert_columns(adv, before, junk())
    inserted = torch.ones(lp.shape[0], len(before), dtype=torch.bool)
    mask2 = insert_columns(mask, before, ~inserted)
    loss, grad, metrics = loss_and_grad(name, lp2, old2, adv2, mask2, **config)
    torch.testing.assert_close(loss, base_loss)
    keep = ~insert_columns(torch.zeros_like(mask), before, inserted)
    torch.testing.assert_close(grad[keep].view_as(base_grad), base_grad)
    assert torch.all(grad[~keep] == 0)
    assert metrics["clip_frac"] == pytest.approx(base_metrics["clip_frac"])


@pytest.mark.parametrize(("name", "config"), CASES, ids=CASE_IDS)
def test_padding_side_and_packing_change_nothing(name, config):
    config = with_defaults(name, config)
    lp, old, adv, mask = batch(per_token_adv=True, b=4, t=9)
    lengths = [9, 5, 7, 3]
    # Right padding: sequence i occupies the first lengths[i] columns.
    right = torch.arange(9)[None, :] < torch.tensor(lengths)[:, None]
    mask_r = mask & right
    ref_loss, ref_grad, _ = loss_and_grad(name, lp, old, adv, mask_r, **config)

    def shift_left(x, fill):
        rows = []
        for i, n in enumerate(lengths):
            rows.append(torch.cat([torch.full((9 - n,), fill, dtype=x.dtype), x[i, :n]]))
        return torch.stack(rows)

    left = loss_and_grad(
        name,
        shift_left(lp.detach(), -7.0),
        shift_left(old, 3.0),
        shift_left(adv, 9.0),
        shift_left(mask_r, False),
        **config,
    )
    torch.testing.assert_close(left[0], ref_loss)

    # Packing: rows 1+3 (5+3 tokens) and 0+2 (9+7 tokens) share rows of width 16.
    def pack(x, fill):
        a = torch.cat([x[1, :5], x[3, :3], torch.full((8,), fill, dtype=x.dtype)])
        b = torch.cat([x[0, :9], x[2, :7]])
        return torch.stack([a, b])

    seg = torch.tensor([[0] * 5 + [1] * 3 + [2] * 8, [0] * 9 + [1] * 7])
    lp_p = pack(lp.detach(), 0.0).requires_grad_(True)
    loss, _ = compute_policy_loss(
        name, lp_p, pack(old, 0.0), pack(adv, 0.0), pack(mask_r, False), segment_ids=seg, **config
    )
    torch.testing.assert_close(loss.detach(), ref_loss)
    (grad_p,) = torch.autograd.grad(loss, lp_p)
    torch.testing.assert_close(grad_p[0, :5], ref_grad[1, :5])
    torch.testing.assert_close(grad_p[1, 9:], ref_grad[2, :7])
    assert loss_normalizer(name, pack(mask_r, False), segment_ids=seg, **config) == loss_normalizer(
        name, mask_r, **config
    )


@pytest.mark.parametrize(("name", "config"), CASES, ids=CASE_IDS)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_micro_batches_sum_to_the_full_batch(name, config, aggregation):
    config = {**config, "aggregation": aggregation, "max_length": 12}
    lp, old, adv, mask = batch(b=6, scale=0.4, per_token_adv=True)
    mask[5] = False  # an empty sequence must not shift the normaliser
    full_loss, full_grad, _ = loss_and_grad(name, lp, old, adv, mask, **config)
    parts = [slice(0, 2), slice(2, 5), slice(5, 6)]
    total_norm = sum(loss_normalizer(name, mask[p], **config) for p in parts)
    assert total_norm == loss_normalizer(name, mask, **config)
    lp_leaf = lp.detach().clone().requires_grad_(True)
    summed = sum(
        compute_policy_loss(name, lp_leaf[p], old[p], adv[p], mask[p], normalizer=total_norm, **config)[0]
        for p in parts
    )
    summed.backward()
    torch.testing.assert_close(summed.detach(), full_loss)
    torch.testing.assert_close(lp_leaf.grad, full_grad)


def test_zero_gradient_in_clipped_regions():
    # One token per sequence, no σ: cases above the window with A>0, below with A<0, beyond c with A<0.
    log_r = torch.tensor([[0.5], [-0.5], [2.0], [0.05], [-0.05]], dtype=F64)
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0, -1.0], dtype=F64)
    old = torch.zeros_like(log_r)
    mask = torch.ones_like(log_r, dtype=torch.bool)
    for name in ("grpo", "dapo", "tapo", "cumprod"):
        _, grad, metrics = loss_and_grad(name, old + log_r, old, adv, mask, clip_ratio_c=3.0)
        assert grad[:3].abs().max() == 0, name
        assert torch.all(grad[3:] != 0), name
        assert metrics["clip_frac"] == pytest.approx(2 / 5)
        assert metrics["dual_clip_frac"] == pytest.approx(1 / 5)
    _, grad, _ = loss_and_grad("grpo", old + log_r, old, adv, mask)
    assert grad[2, 0] != 0  # without the dual clip a large ratio with A<0 keeps its gradient


@pytest.mark.parametrize("correction", ["geo", "cum", "pow", "min"])
def test_no_gradient_into_earlier_tokens_through_sigma(correction):
    lp, old, _, mask = batch(scale=0.05, b=3, t=8)
    mask[:] = True
    adv = torch.zeros(3, 8, dtype=F64)
    adv[:, -1] = torch.tensor([1.0, -1.0, 0.5], dtype=F64)
    cfg = {"state_correction": correction, "clip_low": 0.9, "clip_high": 10.0}
    loss, grad, metrics = loss_and_grad("tapo", lp, old, adv, mask, **cfg)
    assert torch.all(grad[:, :-1] == 0) and torch.all(grad[:, -1] != 0)
    assert metrics["sigma_mean"] != 0
    # ... while σ does depend on the earlier tokens (the test would be vacuous otherwise).
    moved = lp.detach().clone()
    moved[:, :-1] -= 0.05
    assert not torch.allclose(loss_and_grad("tapo", moved, old, adv, mask, **cfg)[0], loss)


def test_state_correction_modes_by_hand():
    delta = torch.tensor([[0.2, 9.0, -0.4, 0.1, 0.3]], dtype=F64)
    mask = torch.tensor([[True, False, True, True, True]])
    expect = {
        "geo": [0.0, 0.2, 0.2, -0.1, -0.1 / 3],
        "cum": [0.0, 0.2, 0.2, -0.2, -0.1],
        "pow": [0.0, 0.2, 0.2, -0.2 / 2**0.5, -0.1 / 3**0.5],
        "min": [0.0, 0.0, 0.0, -0.4, -0.4],  # min(0, ·): a positive history never raises the weight
        "none": [0.0] * 5,
    }
    for mode, values in expect.items():
        got = state_correction(delta, mask, mode, power=0.5)
        torch.testing.assert_close(got, torch.tensor([values], dtype=F64), msg=mode)


@pytest.mark.parametrize("schedule", ["position", "length"])
def test_p0_tapo_window_equals_dapo(schedule):
    lp, old, adv, mask = batch(scale=0.6, b=6, t=12, per_token_adv=True)
    dapo = loss_and_grad("dapo", lp, old, adv, mask)
    tapo = loss_and_grad(
        "tapo",
        lp,
        old,
        adv,
        mask,
        state_correction="none",
        clip_ratio_c=None,
        clip_schedule=schedule,
        clip_exponent=0.0,
        length_ref=5.0,
    )
    assert dapo[2]["clip_frac"] > 0.1  # the window is exercised
    torch.testing.assert_close(tapo[0], dapo[0])
    torch.testing.assert_close(tapo[1], dapo[1])
    for key in ("clip_frac", "clip_frac_high", "clip_frac_low"):
        assert tapo[2][key] == dapo[2][key]


@pytest.mark.parametrize("scale", [1e-4, 0.3])
def test_gspo_equals_gspo_token_for_per_sequence_advantages(scale):
    lp, old, adv, mask = batch(scale=scale, b=8, t=10)
    seq = loss_and_grad("gspo", lp, old, adv, mask)
    tok = loss_and_grad("gspo_token", lp, old, adv, mask)
    torch.testing.assert_close(seq[0], tok[0])
    torch.testing.assert_close(seq[1], tok[1])
    assert seq[2]["clip_frac"] == tok[2]["clip_frac"]


@pytest.mark.parametrize(("name", "config"), CASES, ids=CASE_IDS)
@pytest.mark.parametrize("dtype", [F64, torch.float32, torch.bfloat16])
def test_extreme_ratios_empty_masks_and_low_precision_stay_finite(name, config, dtype):
    config = with_defaults(name, config)
    gen = torch.Generator().manual_seed(1)
    old = torch.zeros(4, 6, dtype=dtype)
    lp = (50 * torch.sign(torch.randn(4, 6, generator=gen))).to(dtype)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[3] = False
    adv = torch.tensor([1.0, -1.0, 2.0, -3.0], dtype=dtype)
    ref = torch.full_like(lp, -50.0)
    loss, grad, metrics = loss_and_grad(name, lp, old, adv, mask, ref_logprobs=ref, kl_coef=0.1, **config)
    assert loss.dtype == dtype and torch.isfinite(loss) and torch.isfinite(grad).all()
    assert all(math.isfinite(v) for v in metrics.values())
    empty = torch.zeros_like(mask)
    loss, grad, metrics = loss_and_grad(name, lp, old, adv, empty, **config)
    assert loss == 0 and torch.all(grad == 0) and metrics["tokens"] == 0
    assert all(math.isfinite(v) for v in metrics.values())


def test_inf_logprobs_on_masked_tokens_are_ignored():
    lp, old, adv, mask = batch()
    lp2 = lp.detach().clone()
    lp2[~mask] = -math.inf
    base = loss_and_grad("tapo", lp, old, adv, mask)
    got = loss_and_grad("tapo", lp2, old, adv, mask)
    torch.testing.assert_close(got[0], base[0])
    assert torch.isfinite(got[1]).all()


def test_kl_estimators_and_truncated_importance_sampling():
    lp, _, adv, mask = batch()
    old = lp.detach()
    ref = old - 0.3
    m = mask.to(F64)
    no_kl = loss_and_grad("dapo", lp, old, adv, mask)[0]
    k1 = loss_and_grad("dapo", lp, old, adv, mask, ref_logprobs=ref, kl_coef=0.5, kl_estimator="k1")[0]
    k3 = loss_and_grad("dapo", lp, old, adv, mask, ref_logprobs=ref, kl_coef=0.5, kl_estimator="k3")[0]
    torch.testing.assert_close(k1 - no_kl, torch.tensor(0.5 * 0.3, dtype=F64))
    torch.testing.assert_close(k3 - no_kl, 0.5 * torch.tensor(math.exp(-0.3) + 0.3 - 1, dtype=F64))
    # Truncated IS: weight min(π_old/μ_behaviour, cap), no gradient through it.
    behavior = old + torch.where(torch.arange(lp.shape[1]) % 2 == 0, 0.5, -2.0).to(F64)
    _, grad, _ = loss_and_grad("dapo", lp, old, adv, mask, behavior_logprobs=behavior, tis_cap=1.5)
    weight = torch.exp(old - behavior).clamp(max=1.5)
    torch.testing.assert_close(grad, -adv[:, None] * weight * m / m.sum())
    with pytest.raises(ValueError, match="ref_logprobs"):
        compute_policy_loss("dapo", lp, old, adv, mask, kl_coef=0.1)


def test_metrics_report_clipping_by_position_and_ratio_quantiles():
    t = 80
    old = torch.zeros(2, t, dtype=F64)
    lp = old.clone()
    lp[:, 70:] = 1.0  # only late tokens leave the window
    adv = torch.ones(2, dtype=F64)
    mask = torch.ones(2, t, dtype=torch.bool)
    _, _, metrics = loss_and_grad("dapo", lp, old, adv, mask)
    assert metrics["clip_frac/pos_0-15"] == 0 and metrics["clip_frac/pos_16-63"] == 0
    assert metrics["clip_frac/pos_64-255"] == pytest.approx(10 / 16)
    assert metrics["clip_frac"] == pytest.approx(10 / 80)
    assert metrics["ratio_q05"] == pytest.approx(1.0) and metrics["ratio_q95"] == pytest.approx(math.e)
    assert metrics["kl_mu_pi"] == pytest.approx(10 / 80 * (math.e - 2))


def test_unknown_names_keys_and_bad_values_raise_clear_errors():
    lp, old, adv, mask = batch()
    with pytest.raises(LossConfigError, match="valid keys: .*clip_low"):
        compute_policy_loss("tapo", lp, old, adv, mask, clip_lo=0.1)
    with pytest.raises(LossConfigError, match="valid: grpo"):
        compute_policy_loss("ppo2", lp, old, adv, mask)
    with pytest.raises(LossConfigError, match="max_length"):
        compute_policy_loss("dr_grpo", lp, old, adv, mask)
    with pytest.raises(LossConfigError, match="state_correction"):
        compute_policy_loss("tapo", lp, old, adv, mask, state_correction="mean")
    with pytest.raises(LossConfigError, match="sequence ratio"):
        compute_policy_loss("gspo", lp, old, adv, mask, state_correction="geo")
    with pytest.raises(ValueError, match="advantages"):
        compute_policy_loss("grpo", lp, old, adv[:2], mask)
    assert set(CONFIG_KEYS) >= {
        "clip_low",
        "clip_high",
        "clip_ratio_c",
        "aggregation",
        "state_correction",
        "state_power",
        "clip_schedule",
        "clip_exponent",
        "length_ref",
        "kl_coef",
        "kl_estimator",
    }
