"""Diagnostics of one policy-loss call (no gradient): clipping, ratios, σ, KL(μ‖π)."""

from __future__ import annotations

import torch
from torch import Tensor

# Bins over a token's index among its sequence's model tokens: [0,16), [16,64), [64,256), [256,∞).
POSITION_BIN_EDGES = (0, 16, 64, 256)
QUANTILES = (0.05, 0.5, 0.95)


def position_bin_labels() -> list[str]:
    edges = list(POSITION_BIN_EDGES)
    return [f"{a}-{b - 1}" for a, b in zip(edges, edges[1:], strict=False)] + [f"{edges[-1]}+"]


@torch.no_grad()
def loss_metrics(
    *,
    m: Tensor,
    delta: Tensor,
    log_ratio: Tensor,
    sigma: Tensor,
    lo: Tensor,
    hi: Tensor,
    adv: Tensor,
    clip_ratio_c: float | None,
    kl: Tensor | None,
) -> dict[str, float]:
    """Fractions are over model tokens (mask 1); every value is finite, also for an empty mask."""
    count = m.sum()
    denom = count.clamp(min=1).to(log_ratio.dtype)
    clipped_high = m & (adv > 0) & (log_ratio > hi)
    clipped_low = m & (adv < 0) & (log_ratio < lo)
    clipped = clipped_high | clipped_low
    if clip_ratio_c is not None:
        dual = m & (adv < 0) & (log_ratio > torch.log(torch.tensor(clip_ratio_c, dtype=log_ratio.dtype)))
    else:
        dual = torch.zeros_like(m)
    out: dict[str, Tensor] = {
        "clip_frac": clipped.sum() / denom,
        "clip_frac_high": clipped_high.sum() / denom,
        "clip_frac_low": clipped_low.sum() / denom,
        "dual_clip_frac": dual.sum() / denom,
        "sigma_mean": (sigma * m).sum() / denom,
        "kl_mu_pi": (_k3_from_log_ratio(delta) * m).sum() / denom,
        "tokens": count.to(log_ratio.dtype),
    }
    index = torch.cumsum(m.long(), dim=1) - m.long()
    edges = list(POSITION_BIN_EDGES) + [None]
    for label, lo_edge, hi_edge in zip(position_bin_labels(), edges, edges[1:], strict=False):
        in_bin = m & (index >= lo_edge) if hi_edge is None else m & (index >= lo_edge) & (index < hi_edge)
        out[f"clip_frac/pos_{label}"] = (clipped & in_bin).sum() / in_bin.sum().clamp(min=1)
    values = log_ratio[m].float().sort().values  # nearest-rank quantiles: one sort, no interpolation
    if values.numel():
        ranks = torch.tensor([round(level * (values.numel() - 1)) for level in QUANTILES])
        q = values[ranks]
    else:
        q = torch.zeros(len(QUANTILES))
    for level, value in zip(QUANTILES, torch.exp(q.clamp(-80, 80)), strict=True):
        out[f"ratio_q{int(level * 100):02d}"] = value
    if kl is not None:
        out["kl_ref"] = (kl * m).sum() / denom
    names = list(out)
    flat = torch.stack([out[k].to(torch.float64).reshape(()) for k in names]).tolist()
    return dict(zip(names, flat, strict=True))


def _k3_from_log_ratio(delta: Tensor) -> Tensor:
    """k3 estimate of KL(μ‖π) from samples of μ: r - 1 - log r with r = π/μ."""
    d = delta.clamp(-20.0, 20.0)
    return torch.exp(d) - 1.0 - d
