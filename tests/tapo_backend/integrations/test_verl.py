"""TAPO's loss as a verl policy loss: the function against ours, and the registration when verl is here."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import torch

from tapo_backend.integrations.verl import make_policy_loss
from tapo_backend.losses import compute_policy_loss

F64 = torch.float64


def batch(seed: int = 0, b: int = 4, t: int = 12):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=gen, dtype=F64) * 2
    lp = (old + 0.3 * torch.randn(b, t, generator=gen, dtype=F64)).requires_grad_(True)
    adv = torch.randn(b, 1, generator=gen, dtype=F64).expand(b, t)
    mask = (torch.rand(b, t, generator=gen) > 0.2).to(F64)
    return old, lp, adv, mask


def actor_config(**info) -> SimpleNamespace:
    return SimpleNamespace(
        clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0, global_batch_info=info
    )


def test_the_verl_function_is_our_loss_with_verls_window_and_global_normaliser():
    old, lp, adv, mask = batch()
    fn = make_policy_loss()
    # two data-parallel ranks, this one holding 4 of 8 sequences / some of the global tokens
    global_tokens = int(mask.sum()) * 2
    loss, metrics = fn(
        old, lp, adv, mask, "token-mean", actor_config(dp_size=2, batch_num_tokens=global_tokens)
    )
    ours, ours_metrics = compute_policy_loss(
        "tapo",
        lp,
        old,
        adv,
        mask,
        clip_low=0.2,
        clip_high=0.28,
        clip_ratio_c=3.0,
        normalizer=global_tokens / 2,
    )
    torch.testing.assert_close(loss, ours, rtol=1e-14, atol=0)
    assert metrics["actor/pg_clipfrac"] == ours_metrics["clip_frac"]
    assert metrics["actor/tapo/sigma_mean"] == ours_metrics["sigma_mean"]
    # verl's own token-mean is local sum / global tokens × dp_size: the same number
    per_token = torch.where(mask.bool(), torch.ones_like(lp), torch.zeros_like(lp))
    assert float(ours.detach()) == pytest.approx(
        float(
            compute_policy_loss("tapo", lp, old, adv, mask, clip_low=0.2, clip_high=0.28)[0].detach()
            * per_token.sum()
            / global_tokens
            * 2
        )
    )
    seq, _ = fn(old, lp, adv, mask, "seq-mean-token-mean", actor_config(dp_size=1, global_batch_size=4))
    ours_seq, _ = compute_policy_loss(
        "tapo",
        lp,
        old,
        adv,
        mask,
        clip_low=0.2,
        clip_high=0.28,
        clip_ratio_c=3.0,
        aggregation="seq-mean-token-mean",
    )
    torch.testing.assert_close(seq, ours_seq, rtol=1e-14, atol=0)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        fn(old, lp, adv, mask, "seq-mean-token-sum-norm", actor_config())


def test_rollout_correction_weights_multiply_each_token():
    old, lp, adv, mask = batch(seed=1)
    weights = torch.rand(old.shape, dtype=F64) + 0.5
    fn = make_policy_loss(clip_ratio_c=None)
    weighted, _ = fn(old, lp, adv, mask, "token-mean", actor_config(), rollout_is_weights=weights)
    (g_weighted,) = torch.autograd.grad(weighted, lp)
    plain, _ = fn(old, lp, adv, mask, "token-mean", actor_config())
    (g_plain,) = torch.autograd.grad(plain, lp)
    torch.testing.assert_close(g_weighted, g_plain * weights, rtol=1e-12, atol=1e-15)


VERL = importlib.util.find_spec("verl") is not None


@pytest.mark.skipif(
    not VERL,
    reason="verl is not installed: `pip install verl` needs transformers<5.11 and ray, which conflict with "
    "this project's transformers>=5.16 pin; run this test in a verl environment",
)
def test_importing_the_integration_registers_tapo_with_verl():
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    import tapo_backend.integrations.verl as integration

    fn = get_policy_loss_fn("tapo")
    assert fn is integration.REGISTERED["tapo"]
    old, lp, adv, mask = batch(seed=2)
    loss, _ = fn(old, lp, adv, mask, "token-mean", actor_config())
    ours, _ = compute_policy_loss("tapo", lp, old, adv, mask, clip_low=0.2, clip_high=0.28, clip_ratio_c=3.0)
    torch.testing.assert_close(loss, ours)
    cum, _ = get_policy_loss_fn("tapo_cum")(old, lp, adv, mask, "token-mean", actor_config())
    ours_cum, _ = compute_policy_loss(
        "tapo", lp, old, adv, mask, clip_low=0.2, clip_high=0.28, clip_ratio_c=3.0, state_correction="cum"
    )
    torch.testing.assert_close(cum, ours_cum)
