"""The one policy-loss call shared by every registered loss.

Shapes: `logprobs`, `old_logprobs`, `mask` are [B, T]; `advantages` is [B] (one per sequence) or
[B, T]. `mask` is 1 on model tokens and 0 on tool/user/system tokens and padding: masked positions
are ignored whatever their log-probs (they may even be ±inf). `old_logprobs` are log μ, the policy
that produced the data (the trainer's recomputation at the start of the iteration, or the logged ones).

Packing: several sequences may share a row when `segment_ids` [B, T] (int) is given; a sequence is
a maximal run of equal ids in a row. Advantages must then be per token. Internally rows are unpacked,
so packing and the padding side do not change the loss.

Gradient accumulation contract: the loss is sum_t w_t·ℓ_t / N where w_t (aggregation weights) are
local to each sequence and N (the normaliser) is a count that adds up over micro-batches:
  token-mean            w = m,       N = number of model tokens
  seq-mean-token-mean   w = m / n_i, N = number of sequences with model tokens
  seq-mean-token-sum    w = m,       N = number of sequences with model tokens
  fixed-length          w = m,       N = number of sequences with model tokens × max_length
Split a batch by whole sequences, compute N_total = sum of `loss_normalizer(...)` over the
micro-batches, pass `normalizer=N_total` to every micro-batch call, and the summed micro-batch losses
(and gradients) equal the full-batch loss. `metrics["normalizer"]` is the local N.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .config import LossConfig, PolicyLoss, resolve
from .metrics import loss_metrics

# Ratios above e^20 are treated as saturated (zero gradient beyond), so no exp overflows even in bf16.
MAX_LOG_RATIO = 20.0


def compute_policy_loss(
    name: str,
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    ref_logprobs: Tensor | None = None,
    behavior_logprobs: Tensor | None = None,
    segment_ids: Tensor | None = None,
    normalizer: float | None = None,
    **config: Any,
) -> tuple[Tensor, dict[str, float]]:
    """Loss of registry entry `name` with config overrides `config`; returns (loss, metrics).

    Unknown config keys raise `LossConfigError` naming the valid ones. See the module docstring for
    shapes, packing and the micro-batch `normalizer` contract.
    """
    loss_def, cfg = resolve(name, **config)
    batch = _prepare(logprobs, old_logprobs, advantages, mask, ref_logprobs, behavior_logprobs, segment_ids)
    if cfg.kl_coef > 0 and batch["ref"] is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs")
    m = batch["mask"]
    delta = torch.where(m, batch["lp"] - batch["old"], torch.zeros_like(batch["lp"]))
    log_ratio, sigma = _log_ratio(loss_def, cfg, batch["lp"], delta, m)
    lo, hi = _clip_window(cfg, m, delta.dtype)
    adv = batch["adv"]

    ratio = torch.exp(log_ratio.clamp(max=MAX_LOG_RATIO))
    clipped = torch.exp(torch.clamp(log_ratio, lo, hi))
    pg = torch.maximum(-adv * ratio, -adv * clipped)
    if cfg.clip_ratio_c is not None:
        pg = torch.where(adv < 0, torch.minimum(pg, -adv * cfg.clip_ratio_c), pg)
    if batch["behavior"] is not None:
        tis = torch.exp(torch.where(m, batch["old"] - batch["behavior"], torch.zeros_like(delta)))
        pg = pg * (tis.clamp(max=cfg.tis_cap) if cfg.tis_cap is not None else tis).detach()
    per_token = pg
    kl = None
    if cfg.kl_coef > 0:
        kl = _kl(batch["lp"], batch["ref"], m, cfg.kl_estimator)
        per_token = per_token + cfg.kl_coef * kl
    per_token = torch.where(m, per_token, torch.zeros_like(per_token))

    weights, local_norm = aggregation_weights(m, cfg, per_token.dtype)
    norm = float(normalizer) if normalizer is not None else local_norm
    loss = (per_token * weights).sum() / (norm if norm > 0 else 1.0)
    metrics = loss_metrics(
        m=m,
        delta=delta.detach(),
        log_ratio=log_ratio.detach(),
        sigma=sigma,
        lo=lo,
        hi=hi,
        adv=adv.detach(),
        clip_ratio_c=cfg.clip_ratio_c,
        kl=None if kl is None else kl.detach(),
    )
    metrics["normalizer"] = local_norm
    metrics["loss"] = float(loss.detach())
    return loss.to(logprobs.dtype), metrics


def loss_normalizer(name: str, mask: Tensor, *, segment_ids: Tensor | None = None, **config: Any) -> float:
    """The normaliser N that `compute_policy_loss` would use for this (micro-)batch on its own."""
    _, cfg = resolve(name, **config)
    m = mask.bool()
    if segment_ids is not None:
        m = _unpack(m, segment_ids, fill=False)
    return aggregation_weights(m, cfg, torch.float64)[1]


def aggregation_weights(m: Tensor, cfg: LossConfig, dtype: torch.dtype) -> tuple[Tensor, float]:
    """Per-token weights w and normaliser N of the configured aggregation (module docstring)."""
    mf = m.to(dtype)
    counts = mf.sum(dim=1)
    sequences = float((counts > 0).sum())
    if cfg.aggregation == "token-mean":
        return mf, float(counts.sum())
    if cfg.aggregation == "seq-mean-token-mean":
        return mf / counts.clamp(min=1.0).unsqueeze(1), sequences
    if cfg.aggregation == "seq-mean-token-sum":
        return mf, sequences
    return mf, sequences * float(cfg.max_length)


def state_correction(delta: Tensor, m: Tensor, mode: str, power: float = 0.5) -> Tensor:
    """σ_t from the log-ratios of earlier model tokens j<t (m_j=1); 0 where there are none. No grad.

    `min` is min(0, min_{j<t} δ_j): a pessimistic estimate that only ever lowers the weight.
    """
    delta = torch.where(m, delta.detach(), torch.zeros_like(delta))
    if mode == "none":
        return torch.zeros_like(delta)
    n_before = torch.cumsum(m.to(delta.dtype), dim=1) - m.to(delta.dtype)
    sum_before = torch.cumsum(delta, dim=1) - delta
    if mode == "cum":
        return sum_before
    if mode == "geo":
        return sum_before / n_before.clamp(min=1.0)
    if mode == "pow":
        return sum_before / n_before.clamp(min=1.0) ** power
    inf = torch.full_like(delta, float("inf"))
    running_min = torch.cummin(torch.where(m, delta, inf), dim=1).values
    shifted = torch.cat([inf[:, :1], running_min[:, :-1]], dim=1)
    return torch.where(torch.isinf(shifted), torch.zeros_like(delta), shifted).clamp(max=0.0)


def _log_ratio(
    loss_def: PolicyLoss, cfg: LossConfig, lp: Tensor, delta: Tensor, m: Tensor
) -> tuple[Tensor, Tensor]:
    if loss_def.ratio == "state":
        sigma = state_correction(delta, m, cfg.state_correction, cfg.state_power)
        return sigma + delta, sigma
    counts = m.sum(dim=1, keepdim=True).clamp(min=1).to(delta.dtype)
    if loss_def.ratio == "sequence":
        seq = delta.sum(dim=1, keepdim=True) / counts
        return seq.expand_as(delta), torch.zeros_like(delta)
    seq = delta.detach().sum(dim=1, keepdim=True) / counts
    lp_safe = torch.where(m, lp, torch.zeros_like(lp))
    return seq + lp_safe - lp_safe.detach(), torch.zeros_like(delta)


def _clip_window(cfg: LossConfig, m: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    mf = m.to(dtype)
    if cfg.clip_schedule == "position" and cfg.clip_exponent != 0:
        g = (torch.cumsum(mf, dim=1) - mf + 1.0) ** cfg.clip_exponent
    elif cfg.clip_schedule == "length" and cfg.clip_exponent != 0:
        g = (mf.sum(dim=1, keepdim=True).clamp(min=1.0) / cfg.length_ref) ** cfg.clip_exponent
        g = g.expand_as(mf)
    else:
        g = torch.ones_like(mf)
    lo = math.log1p(-cfg.clip_low) * g
    hi = math.log1p(cfg.clip_high) * g
    return lo, hi


def _kl(lp: Tensor, ref: Tensor, m: Tensor, estimator: str) -> Tensor:
    diff = torch.where(m, ref - lp, torch.zeros_like(lp)).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    if estimator == "k1":
        return -diff
    return torch.exp(diff) - diff - 1.0


def _prepare(
    lp: Tensor,
    old: Tensor,
    adv: Tensor,
    mask: Tensor,
    ref: Tensor | None,
    behavior: Tensor | None,
    segment_ids: Tensor | None,
) -> dict[str, Any]:
    if lp.dim() != 2 or old.shape != lp.shape or mask.shape != lp.shape:
        raise ValueError(
            f"logprobs, old_logprobs and mask must share a [B, T] shape; got "
            f"{tuple(lp.shape)}, {tuple(old.shape)}, {tuple(mask.shape)}"
        )
    for label, extra in (("ref_logprobs", ref), ("behavior_logprobs", behavior)):
        if extra is not None and extra.shape != lp.shape:
            raise ValueError(f"{label} must have shape {tuple(lp.shape)}, got {tuple(extra.shape)}")
    if adv.shape == lp.shape[:1]:
        if segment_ids is not None:
            raise ValueError("packed batches (segment_ids) need per-token advantages [B, T]")
        adv = adv.unsqueeze(1).expand_as(lp)
    elif adv.shape != lp.shape:
        raise ValueError(f"advantages must be [B] or [B, T] = {tuple(lp.shape)}, got {tuple(adv.shape)}")
    compute = torch.float32 if lp.dtype in (torch.float16, torch.bfloat16) else lp.dtype
    tensors = {"lp": lp, "old": old, "adv": adv, "ref": ref, "behavior": behavior}
    out: dict[str, Any] = {k: None if v is None else v.to(compute) for k, v in tensors.items()}
    out["old"] = out["old"].detach()
    out["adv"] = out["adv"].detach()
    out["mask"] = mask.bool()
    if segment_ids is not None:
        if segment_ids.shape != lp.shape:
            raise ValueError(f"segment_ids must have shape {tuple(lp.shape)}, got {tuple(segment_ids.shape)}")
        for key in ("lp", "old", "adv", "ref", "behavior"):
            if out[key] is not None:
                out[key] = _unpack(out[key], segment_ids, fill=0.0)
        out["mask"] = _unpack(out["mask"], segment_ids, fill=False)
    return out


def _unpack(x: Tensor, segment_ids: Tensor, fill: Any) -> Tensor:
    """[B, T] packed rows -> [S, L]: one row per sequence (maximal run of equal ids), right-padded."""
    rows, width = segment_ids.shape
    starts = torch.ones_like(segment_ids, dtype=torch.bool)
    starts[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
    seq_index = torch.cumsum(starts.flatten().long(), dim=0) - 1
    cols = torch.arange(width, device=x.device).expand(rows, width)
    start_col = torch.cummax(torch.where(starts, cols, torch.zeros_like(cols)), dim=1).values
    pos = (cols - start_col).flatten()
    n_seq, length = int(seq_index[-1]) + 1, int(pos.max()) + 1
    out = torch.full((n_seq, length), fill, dtype=x.dtype, device=x.device)
    return out.index_put((seq_index, pos), x.flatten())
