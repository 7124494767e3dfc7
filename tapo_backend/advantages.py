"""Group-relative advantages: one scalar per trajectory, from the rewards of its group.

A group is all trajectories of the same *task* (several rollouts of one problem). Group by task id,
never by turn: every turn of a multi-turn trajectory shares its trajectory's advantage.

Modes:
  grpo   (r - mean_g) / (std_g + eps)   group-normalised (Shao et al. 2024); std is unbiased
  dr_grpo r - mean_g                    no std division (Liu et al. 2025), pairs with `dr_grpo` loss
  loo    r - mean of the *other* members of the group (leave-one-out baseline)
Groups whose rewards are all equal (zero variance) and singleton groups get advantage 0 in every
mode: they carry no learning signal, and the std division must not blow up rounding noise.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

MODES = ("grpo", "dr_grpo", "loo")


def group_index(group_ids: Sequence[Hashable] | Tensor) -> Tensor:
    """Dense int index [N] (0..G-1, in order of first appearance) for arbitrary task ids."""
    if isinstance(group_ids, Tensor):
        return torch.unique(group_ids, return_inverse=True)[1].flatten()
    first_seen: dict[Hashable, int] = {}
    return torch.tensor([first_seen.setdefault(g, len(first_seen)) for g in group_ids], dtype=torch.long)


def group_advantages(
    rewards: Tensor, group_ids: Sequence[Hashable] | Tensor, mode: str = "grpo", eps: float = 1e-6
) -> Tensor:
    """Advantages [N] for rewards [N] grouped by task id (see module docstring for `mode`)."""
    if mode not in MODES:
        raise ValueError(f"advantage mode {mode!r} is not one of {', '.join(MODES)}")
    rewards = rewards.detach()
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    index = group_index(group_ids).to(rewards.device)
    if index.numel() != rewards.numel():
        raise ValueError(f"{rewards.numel()} rewards but {index.numel()} group ids")
    if rewards.numel() == 0:
        return rewards.clone()
    dtype = rewards.dtype if rewards.is_floating_point() else torch.float64
    r = rewards.to(dtype)
    groups = int(index.max()) + 1
    size = torch.zeros(groups, dtype=dtype, device=r.device).index_add_(0, index, torch.ones_like(r))
    total = torch.zeros(groups, dtype=dtype, device=r.device).index_add_(0, index, r)
    mean = (total / size)[index]
    centred = r - mean
    sq = torch.zeros(groups, dtype=dtype, device=r.device).index_add_(0, index, centred**2)
    n = size[index]
    std = torch.sqrt(sq[index] / (n - 1).clamp(min=1))
    # Equal rewards can leave rounding residue in `centred`; treat spreads below this as zero.
    informative = (n > 1) & (std > 1e-12 * (1.0 + mean.abs()))
    if mode == "grpo":
        adv = centred / (std + eps)
    elif mode == "dr_grpo":
        adv = centred
    else:
        adv = centred * n / (n - 1).clamp(min=1)
    return torch.where(informative, adv, torch.zeros_like(adv))


def zero_variance_groups(rewards: Tensor, group_ids: Sequence[Hashable] | Tensor) -> Tensor:
    """Bool [N]: True for trajectories whose group has a single reward value (no learning signal)."""
    index = group_index(group_ids).to(rewards.device)
    groups = int(index.max()) + 1 if index.numel() else 0
    r = rewards.detach().to(torch.float64)
    high = torch.full((groups,), -torch.inf, dtype=r.dtype).scatter_reduce(0, index, r, "amax")
    low = torch.full((groups,), torch.inf, dtype=r.dtype).scatter_reduce(0, index, r, "amin")
    return (high == low)[index]
