"""Synthetic long-horizon tasks for the TAPO stability experiments (CPU, vectorised over seeds).

Both experiments use the same "chain" task: a correct next token is a fixed function g of the previous
token, and the reward of a sequence is the fraction of the horizon survived before its first mistake,
R = (index of first error) / T. Earlier mistakes move later tokens into other states, which is the
state-distribution shift TAPO corrects for.

E1 (`estimator_bias_variance`): a *tabular* autoregressive policy (one logit table per position and
previous token), every sequence enumerated, so the bias and variance of each off-policy gradient
estimator are exact numbers, not Monte-Carlo estimates.

E2 (`stale_replay`): a small MLP policy over the previous token whose parameters are *shared across
positions*; each update trains on a batch sampled by the policy `staleness` updates old, with one of
the registered losses. Success is the exact expected reward of the current policy (no sampling noise).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .advantages import group_advantages
from .losses import compute_policy_loss

E2_DTYPE = torch.float32  # E2 trains small MLPs: float32 halves the CPU time; E1 is exact in float64
E1_ESTIMATORS = ("token", "cumulative", "geo-mean", "gspo", "sequence")


# ----------------------------------------------------------------------------------------------- E1


def _tabular_logprobs(theta: Tensor, seqs: Tensor) -> tuple[Tensor, Tensor]:
    """log π(y_t | t, y_{t-1}) [N, H] and π(· | t, y_{t-1}) [N, H, V] for a table theta [H, V+1, V]."""
    n, horizon = seqs.shape
    vocab = theta.shape[-1]
    prev = torch.cat([torch.full((n, 1), vocab, dtype=torch.long), seqs[:, :-1]], dim=1)
    logits = theta[torch.arange(horizon).expand(n, horizon), prev]
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, seqs.unsqueeze(-1)).squeeze(-1), logp.exp()


def survival_reward(correct: Tensor) -> Tensor:
    """(index of the first False along the last dim) / length; 1 when all are True."""
    return torch.cumprod(correct.to(torch.float64), dim=-1).sum(dim=-1) / correct.shape[-1]


def estimator_bias_variance(
    horizon: int, vocab: int = 2, mismatch: float = 0.3, seed: int = 0, batch: int = 64
) -> dict[str, dict[str, float]]:
    """Exact relative bias, variance and batch-MSE of each E1 estimator from samples of μ.

    Estimators of the gradient w.r.t. the table θ_π, from one sequence y ~ μ with return R(y):
    token Σ_t r_t R ∇log π_t; cumulative Σ_t (Π_{j<=t} r_j) R ∇log π_t; geo-mean
    Σ_t exp(mean_{j<t} log r_j) r_t R ∇log π_t; gspo Σ_t exp(mean_j log r_j) R ∇log π_t; sequence
    (Π_j r_j) R Σ_t ∇log π_t (ordinary importance sampling: unbiased for ∇J).

    Bias is measured against g* = Σ_t E_{y≤t ~ π, y>t ~ μ}[R ∇log π_t] (the first t tokens from π,
    the rest from μ): the target a per-token surrogate whose later tokens are still sampled by μ
    estimates, and the one the cumulative-prefix estimator is exactly unbiased for; g* = ∇J on-policy.
    g* is computed here from those mixed-policy probabilities, independently of the estimators.
    `rel_bias` is ‖E ĝ − g*‖/‖g*‖; `rel_bias_grad_j` the same against ∇J. Variances are relative to ‖g*‖².
    """
    gen = torch.Generator().manual_seed(seed)
    theta_pi = torch.randn(horizon, vocab + 1, vocab, generator=gen, dtype=torch.float64)
    theta_mu = theta_pi + mismatch * torch.randn(theta_pi.shape, generator=gen, dtype=torch.float64)
    target = torch.randint(vocab, (horizon,), generator=gen)
    seqs = torch.tensor(list(itertools.product(range(vocab), repeat=horizon)), dtype=torch.long)
    lp_pi, probs_pi = _tabular_logprobs(theta_pi, seqs)
    lp_mu, _ = _tabular_logprobs(theta_mu, seqs)
    reward = survival_reward(seqs == target)
    n = seqs.shape[0]
    # ∇_θ log π(y_t | t, prev) = onehot(y_t) - π(· | t, prev), placed in the (t, prev) row of θ.
    score_rows = torch.nn.functional.one_hot(seqs, vocab).to(torch.float64) - probs_pi
    prev = torch.cat([torch.full((n, 1), vocab, dtype=torch.long), seqs[:, :-1]], dim=1)
    row = torch.arange(horizon) * (vocab + 1) + prev  # [N, H]
    scores = torch.zeros(n, horizon, horizon * (vocab + 1), vocab, dtype=torch.float64)
    scores.scatter_(2, row[..., None, None].expand(n, horizon, 1, vocab), score_rows.unsqueeze(2))
    scores = scores.flatten(2)  # [N, H, D]
    p_pi, p_mu = lp_pi.sum(1).exp(), lp_mu.sum(1).exp()
    grad_j = (p_pi[:, None] * reward[:, None] * scores.sum(1)).sum(0)
    # P(y) with tokens 1..t from π and t+1..H from μ, for every t: [N, H]
    mixed = (torch.cumsum(lp_pi, 1) + lp_mu.sum(1, keepdim=True) - torch.cumsum(lp_mu, 1)).exp()
    g_star = ((mixed * reward[:, None]).unsqueeze(-1) * scores).sum(dim=(0, 1))
    log_r = lp_pi - lp_mu
    before = torch.cumsum(log_r, 1) - log_r
    weights = {
        "token": log_r.exp(),
        "cumulative": torch.cumsum(log_r, 1).exp(),
        "geo-mean": (before / torch.arange(horizon).clamp(min=1) + log_r).exp(),
        "gspo": log_r.mean(1, keepdim=True).exp().expand(n, horizon),
        "sequence": log_r.sum(1, keepdim=True).exp().expand(n, horizon),
    }
    scale = float(g_star.pow(2).sum())
    out: dict[str, dict[str, float]] = {}
    for name, w in weights.items():
        per_sample = ((w * reward[:, None]).unsqueeze(-1) * scores).sum(1)  # [N, D]
        mean = (p_mu[:, None] * per_sample).sum(0)
        bias2 = float((mean - g_star).pow(2).sum()) / scale
        var = float((p_mu * (per_sample - mean).pow(2).sum(1)).sum()) / scale
        out[name] = {
            "rel_bias": math.sqrt(bias2),
            "rel_bias_grad_j": float((mean - grad_j).norm() / grad_j.norm()),
            "rel_var": var,
            "rel_mse_batch": bias2 + var / batch,
            "cosine": float(torch.nn.functional.cosine_similarity(mean, g_star, dim=0)),
        }
    out["_meta"] = {
        "kl_mu_pi_per_token": float((p_mu[:, None] * (lp_mu - lp_pi)).sum(0).mean()),
        "grad_norm": math.sqrt(scale),
        "g_star_vs_grad_j": float((g_star - grad_j).norm() / grad_j.norm()),
    }
    return out


# ----------------------------------------------------------------------------------------------- E2


@dataclass(frozen=True)
class StaleReplayConfig:
    """One E2 run (vectorised over `seeds`). Defaults are the calibrated regime (see benchmark)."""

    horizon: int = 64
    staleness: int = 16
    seeds: int = 10
    updates: int = 500
    vocab: int = 8
    hidden: int = 64
    position_features: int = 16
    group_size: int = 8
    lr: float = 0.02
    warmup: int = 20
    init_accuracy: float = 0.95
    advantage_mode: str = "grpo"
    loss_config: dict[str, Any] = field(default_factory=dict)


class SharedChainPolicy(torch.nn.Module):
    """Per-seed MLP of (previous token, fixed position features) -> next-token logits.

    The same weights serve every position, so an update made for one position moves all others.
    """

    def __init__(self, cfg: StaleReplayConfig, gen: torch.Generator) -> None:
        super().__init__()

        def init(*shape: int, scale: float) -> torch.nn.Parameter:
            return torch.nn.Parameter(scale * torch.randn(*shape, generator=gen, dtype=E2_DTYPE))

        s, v, h, f = cfg.seeds, cfg.vocab, cfg.hidden, cfg.position_features
        self.register_buffer("positions", torch.randn(cfg.horizon, f, generator=gen, dtype=E2_DTYPE))
        self.prev_in = init(s, 1, v, h, scale=1.0)
        self.pos_in = init(s, f, h, scale=1.0 / math.sqrt(f))
        self.out = init(s, h, v, scale=1.0 / math.sqrt(h))
        self.bias = init(s, 1, 1, v, scale=0.0)

    def table(self) -> Tensor:
        """Log-probabilities [S, T(position), V(prev), V(next)]."""
        hidden = torch.tanh(self.prev_in + (self.positions @ self.pos_in).unsqueeze(2))  # [S, T, V, H]
        logits = hidden @ self.out.unsqueeze(1) + self.bias
        return torch.log_softmax(logits, dim=-1)


def chain_targets(cfg: StaleReplayConfig, gen: torch.Generator) -> Tensor:
    """Correct next token [S, T, V(prev)]: (prev + c_t) mod V with a random shift c_t per position."""
    shifts = torch.randint(cfg.vocab, (cfg.seeds, cfg.horizon, 1), generator=gen)
    return (torch.arange(cfg.vocab) + shifts) % cfg.vocab


def pretrain(policy: SharedChainPolicy, targets: Tensor, accuracy: float, steps: int = 300) -> None:
    """Fit the policy to put about `accuracy` on each correct next token (a competent start model)."""
    vocab = targets.shape[-1]
    goal = torch.full((*targets.shape, vocab), (1.0 - accuracy) / (vocab - 1), dtype=E2_DTYPE)
    goal.scatter_(-1, targets.unsqueeze(-1), accuracy)
    opt = torch.optim.Adam(policy.parameters(), lr=0.03)
    for _ in range(steps):
        opt.zero_grad()
        (-(goal * policy.table()).sum(-1).mean(dim=(1, 2)).sum()).backward()
        opt.step()


def _sample(table: Tensor, starts: Tensor, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Tokens [S, B, T] from the tables [S, T, V, V] after start tokens [B]; also the previous tokens."""
    seeds, horizon, vocab = table.shape[0], table.shape[1], table.shape[-1]
    batch = starts.shape[0]
    cdf = table.exp().cumsum(-1)
    u = torch.rand(seeds, batch, horizon, 1, generator=gen, dtype=table.dtype)
    seed_index = torch.arange(seeds)[:, None]
    prev = starts.expand(seeds, batch)
    tokens = torch.empty(seeds, batch, horizon, dtype=torch.long)
    for t in range(horizon):
        prev = torch.searchsorted(cdf[seed_index, t, prev], u[:, :, t].contiguous()).squeeze(-1)
        prev = prev.clamp(max=vocab - 1)  # guards a uniform draw above the float cdf's last entry
        tokens[:, :, t] = prev
    previous = torch.cat([starts.expand(seeds, batch).unsqueeze(-1), tokens[..., :-1]], dim=-1)
    return tokens, previous


def expected_success(table: Tensor, targets: Tensor) -> Tensor:
    """Exact E[R] per seed [S], averaged over start tokens (the path without mistakes is fixed)."""
    seeds, horizon, vocab = targets.shape
    seed_index = torch.arange(seeds)[:, None]
    prev = torch.arange(vocab).expand(seeds, vocab)
    p_correct = []
    for t in range(horizon):
        nxt = targets[seed_index, t, prev]
        p_correct.append(table[seed_index, t, prev, nxt].exp())
        prev = nxt
    return torch.cumprod(torch.stack(p_correct, -1), dim=-1).mean(dim=(1, 2))


@functools.lru_cache(maxsize=4)
def _pretrained(
    task: tuple[int, int, int, int, int, float], base_seed: int
) -> tuple[dict[str, Tensor], Tensor]:
    horizon, seeds, vocab, hidden, features, accuracy = task
    cfg = StaleReplayConfig(
        horizon=horizon,
        seeds=seeds,
        vocab=vocab,
        hidden=hidden,
        position_features=features,
        init_accuracy=accuracy,
    )
    gen = torch.Generator().manual_seed(base_seed)
    policy = SharedChainPolicy(cfg, gen)
    targets = chain_targets(cfg, gen)
    if cfg.init_accuracy > 1.0 / cfg.vocab:
        pretrain(policy, targets, cfg.init_accuracy)
    return {k: v.detach().clone() for k, v in policy.state_dict().items()}, targets


def _initial_policy(cfg: StaleReplayConfig, base_seed: int) -> tuple[SharedChainPolicy, Tensor]:
    """The pretrained start policy; shared (cached) by runs that differ only in loss/staleness/lr."""
    task = (cfg.horizon, cfg.seeds, cfg.vocab, cfg.hidden, cfg.position_features, cfg.init_accuracy)
    state, targets = _pretrained(task, base_seed)
    policy = SharedChainPolicy(cfg, torch.Generator().manual_seed(base_seed))
    policy.load_state_dict(state)
    return policy, targets


def stale_replay(loss_name: str, cfg: StaleReplayConfig, base_seed: int = 0) -> dict[str, Any]:
    """Train `cfg.seeds` independent policies with `loss_name` on stale batches; success curves [S, U].

    Update u trains on a fresh batch sampled by the policy of update u - staleness (its log-probs are
    the loss's `old_logprobs`), one optimizer step per batch, Adam with linear LR warmup.
    """
    policy, targets = _initial_policy(cfg, base_seed)
    gen = torch.Generator().manual_seed(base_seed + 1)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda u: min(1.0, (u + 1) / max(cfg.warmup, 1)))
    starts = torch.arange(cfg.vocab).repeat_interleave(cfg.group_size)  # tasks = start tokens
    s_idx, t_idx = torch.arange(cfg.seeds)[:, None, None], torch.arange(cfg.horizon)
    group_ids = (torch.arange(cfg.seeds)[:, None] * cfg.vocab + starts).flatten()
    history = [policy.table().detach()]
    success, clip_frac, kl, ratio_band = [], [], [], []
    loss_kwargs = dict(cfg.loss_config)
    if loss_name == "dr_grpo":
        loss_kwargs.setdefault("max_length", cfg.horizon)
    for _ in range(cfg.updates):
        behaviour = history[max(0, len(history) - 1 - cfg.staleness)]
        tokens, prev = _sample(behaviour, starts, gen)
        correct = tokens == targets[s_idx, t_idx, prev]
        adv = group_advantages(survival_reward(correct).flatten(), group_ids, cfg.advantage_mode)
        logprobs = policy.table()[s_idx, t_idx, prev, tokens].flatten(0, 1)
        old = behaviour[s_idx, t_idx, prev, tokens].flatten(0, 1)
        mask = torch.ones_like(logprobs, dtype=torch.bool)
        loss, metrics = compute_policy_loss(loss_name, logprobs, old, adv, mask, **loss_kwargs)
        opt.zero_grad()
        (loss * cfg.seeds).backward()  # equal-size seeds: the sum of the per-seed losses
        opt.step()
        sched.step()
        with torch.no_grad():
            table = policy.table()
            history = (history + [table])[-(cfg.staleness + 1) :]
            success.append(expected_success(table, targets))
        clip_frac.append(metrics["clip_frac"] + metrics["dual_clip_frac"])
        kl.append(metrics["kl_mu_pi"])
        ratio_band.append((metrics["ratio_q05"], metrics["ratio_q95"]))
    return {
        "success": torch.stack(success, dim=1),
        "clip_frac": clip_frac,
        "kl_mu_pi": kl,
        "ratio_q05_q95": ratio_band,  # of the loss's ratio (GSPO: the sequence ratio of every token)
    }


def summarize_curves(success: Tensor, reach: float = 0.9, collapse: float = 0.5) -> dict[str, float]:
    """Final/best success, area under the curve, and collapse measured from each run's own best.

    `max_drop` is the largest fall below the best success seen so far (running max − current);
    a run crashed when it fell below (1 − `collapse`) × its best-so-far at some update, whatever
    that best was (a fall from 0.74 to 0.20 counts as much as one from 0.95 to 0.25).
    """
    best_so_far = torch.cummax(success, dim=1).values
    drop = (best_so_far - success).max(1).values
    crashed = (success < (1.0 - collapse) * best_so_far).any(1)
    return {
        "final": float(success[:, -1].mean()),
        "best": float(success.max(1).values.mean()),
        "auc": float(success.mean()),
        "max_drop": float(drop.mean()),
        "crash_rate": float(crashed.double().mean()),
        f"reached_{reach}": float((success >= reach).any(1).double().mean()),
        "final_sd": float(success[:, -1].std()) if success.shape[0] > 1 else 0.0,
    }


# Two-sided 95% Student t quantiles t_{0.975, df} for df = 1..30 (beyond: the normal 1.96).
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)  # fmt: skip


def paired_effect(on: Tensor, off: Tensor) -> dict[str, float]:
    """Mean of the per-seed differences `on − off` [S] and its 95% t confidence interval (paired)."""
    diff = (on - off).to(torch.float64)
    n = diff.numel()
    mean = float(diff.mean())
    quantile = T975[n - 2] if 2 <= n <= len(T975) + 1 else 1.96
    half = quantile * float(diff.std()) / math.sqrt(n) if n > 1 else math.nan
    return {"effect": mean, "ci_low": mean - half, "ci_high": mean + half, "seeds": n}
