"""Which iteration samples which batch, and which rollouts an iteration trains on (lagged pipeline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recreate.finetune.online import OnlineConfig
from recreate.finetune.online_batches import SAMPLED, replay_batch, to_sample, versions_behind


def _rollout(run: Path, iteration: int, version: int) -> None:
    folder = run / "rollouts" / f"it-{iteration:03d}"
    (folder / "raw").mkdir(parents=True)
    (folder / f"t-{iteration}.json").write_text(json.dumps({"metadata": {"policy_version": version}}))
    (folder / "raw" / "ignored.json").write_text("{}")


def test_lagged_replay_trains_only_on_the_rollouts_sampled_for_the_iteration(tmp_path: Path) -> None:
    for j in range(1, 6):  # a lag-2 pipeline: batch j sampled at iteration max(1, j - 2), by its policy
        _rollout(tmp_path, j, version=max(0, j - 3))
    batch = replay_batch(tmp_path, 5, current_version=4, max_staleness=0, lag=2)
    assert [p.name for p in batch.iterdir()] == ["t-5.json"]
    assert versions_behind(batch, 4) == 2
    first = replay_batch(tmp_path, 1, current_version=0, max_staleness=0, lag=2)  # sampled by the base
    assert [p.name for p in first.iterdir()] == ["t-1.json"] and versions_behind(first, 0) == 0
    with pytest.raises(ValueError, match="either lag or max_staleness"):
        replay_batch(tmp_path, 5, current_version=2, max_staleness=1, lag=2)


def _mark(run: Path, j: int, sampled_at: int) -> None:
    folder = run / "rollouts" / f"it-{j:03d}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SAMPLED).write_text(json.dumps({"sampled_at": sampled_at, "policy_version": sampled_at - 1}))


def test_a_lagged_run_samples_k_ahead_and_every_iteration_trains(tmp_path: Path) -> None:
    config = OnlineConfig(iterations=6, lag=2)
    schedule = {}
    for iteration in range(1, 7):
        schedule[iteration] = to_sample(tmp_path, iteration, config)
        for j in schedule[iteration]:
            _mark(tmp_path, j, iteration)
    # the first samples the batches of 1..3 with the base policy, each later one the batch 2 ahead; the
    # batch each iteration trains on was sampled before it (or by it, at the first)
    assert schedule == {1: [1, 2, 3], 2: [4], 3: [5], 4: [6], 5: [], 6: []}
    longer = OnlineConfig(iterations=8, lag=2)  # the run resumed with more iterations
    assert to_sample(tmp_path, 7, longer) == [7, 8]  # what it lacks, sampled now (less stale: recorded)
    assert to_sample(tmp_path, 4, config) == [6]  # a restarted iteration samples its own part again
    (tmp_path / "rollouts" / "it-005" / SAMPLED).unlink()  # cut short while sampling ahead
    assert to_sample(tmp_path, 4, config) == [5, 6]
    (tmp_path / "rollouts" / "it-005" / SAMPLED).write_text("{not json")
    assert to_sample(tmp_path, 4, config) == [5, 6]
    assert to_sample(tmp_path / "on-policy", 3, OnlineConfig(iterations=6)) == [3]  # its own batch only
