"""Group-relative advantages."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tapo_backend.advantages import MODES, group_advantages, group_index, zero_variance_groups

F64 = torch.float64


def test_grpo_dr_grpo_and_leave_one_out_match_their_definitions():
    r = torch.tensor([1.0, 0.0, 0.5, 0.3, 0.9], dtype=F64)
    ids = ["task-a", "task-a", "task-a", "task-b", "task-b"]
    a = r[:3]
    torch.testing.assert_close(group_advantages(r, ids, "grpo", eps=0.0)[:3], (a - a.mean()) / a.std())
    torch.testing.assert_close(group_advantages(r, ids, "dr_grpo")[:3], a - a.mean())
    loo = torch.stack([a[i] - torch.cat([a[:i], a[i + 1 :]]).mean() for i in range(3)])
    torch.testing.assert_close(group_advantages(r, ids, "loo")[:3], loo)
    b = r[3:]
    torch.testing.assert_close(group_advantages(r, ids, "dr_grpo")[3:], b - b.mean())


@pytest.mark.parametrize("mode", MODES)
def test_zero_variance_and_singleton_groups_get_zero(mode):
    r = torch.tensor([0.7, 0.7, 0.7, 0.1 + 0.2, 0.3, 1.0], dtype=F64)  # 0.1+0.2 != 0.3 in floats
    ids = [0, 0, 0, 1, 1, 2]
    adv = group_advantages(r, ids, mode)
    assert torch.all(adv == 0)
    assert torch.isfinite(adv).all()
    assert zero_variance_groups(r, ids).tolist() == [True, True, True, False, False, True]


@settings(max_examples=30, deadline=None)
@given(
    rewards=st.lists(st.floats(-5, 5), min_size=2, max_size=20),
    groups=st.integers(1, 4),
    mode=st.sampled_from(MODES),
    seed=st.integers(0, 100),
)
def test_permutation_equivariance_and_zero_group_mean(rewards, groups, mode, seed):
    r = torch.tensor(rewards, dtype=F64)
    ids = [f"task{i % groups}" for i in range(len(rewards))]
    adv = group_advantages(r, ids, mode)
    perm = torch.randperm(len(rewards), generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(group_advantages(r[perm], [ids[i] for i in perm], mode), adv[perm])
    index = group_index(ids)
    for g in range(groups):
        members = adv[index == g]
        if members.numel():
            assert abs(float(members.sum())) < 1e-9 * (1 + float(r.abs().max())) * len(rewards)
    assert torch.isfinite(adv).all()


def test_groups_are_by_task_id_not_by_position_or_turn():
    # Two trajectories of task "x" separated by others: they form one group wherever they sit.
    r = torch.tensor([1.0, 5.0, 0.0, 5.0], dtype=F64)
    adv = group_advantages(r, ["x", "y", "x", "z"], "dr_grpo")
    assert adv.tolist() == [0.5, 0.0, -0.5, 0.0]
    torch.testing.assert_close(group_index(torch.tensor([7, 3, 7])), torch.tensor([1, 0, 1]))


def test_bad_input_raises_clear_errors():
    r = torch.tensor([1.0, 0.0])
    with pytest.raises(ValueError, match="not one of"):
        group_advantages(r, [0, 0], "ppo")
    with pytest.raises(ValueError, match="2 rewards but 3 group ids"):
        group_advantages(r, [0, 0, 1])
    with pytest.raises(ValueError, match="1-D"):
        group_advantages(r[None, :], [0])
    assert group_advantages(torch.tensor([], dtype=F64), []).numel() == 0
