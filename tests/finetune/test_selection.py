"""What `recreate finetune` trains on, and which logged runs the online loop may replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recreate.experience.schema import ModelInfo, Step
from recreate.finetune.offline import FinetuneError, select_trajectories
from recreate.finetune.online import pass_at_1
from recreate.finetune.online_batches import replay_batch
from tests.experience.factory import make_trajectory

SAMPLED = {"temperature": 0.7, "post_sampling_probs": True, "top_k": 0}


def _logged(trajectory_id: str, *, task: str = "t1", sampling=SAMPLED, tokens: bool = True, version="v1"):
    traj = make_trajectory(trajectory_id, task_id=task, version=version)
    traj.model = ModelInfo(name="smollm2", sampling=dict(sampling))
    traj.steps = [
        Step(index=0, token_ids=[1, 2] if tokens else None, logprobs=[-0.1, -0.2] if tokens else None)
    ]
    return traj


def _run(tmp_path: Path, trajectories, val=("held",)) -> Path:
    run = tmp_path / "runs" / "r1"
    (run / "trajectories").mkdir(parents=True)
    train = sorted({t.task_id for t in trajectories} - set(val))
    (run / "config.json").write_text(json.dumps({"train": train, "val": list(val)}))
    for traj in trajectories:
        traj.save(run / "trajectories" / f"{traj.trajectory_id}.json")
    return run


def test_selection_keeps_training_runs_logged_as_sampled_and_holds_validation_out(tmp_path):
    run = _run(tmp_path, [
        _logged("t-ok1"), _logged("t-ok2", task="t2"),
        _logged("t-val", task="held"),
        _logged("t-raw", sampling={"temperature": 0.7}),  # raw log-probs under T=0.7: not the behaviour's
        _logged("t-notok", tokens=False),
        _logged("t-v2", version="v2"),
    ])  # fmt: skip
    chosen = select_trajectories(run, versions={"v1"})
    assert sorted(f.stem for f in chosen.files) == ["t-ok1", "t-ok2"]
    assert chosen.temperature == 0.7
    assert chosen.skipped == {
        "held-out task (validation or test)": 1,
        "log-probs are not the sampling distribution's": 1,
        "no token ids / log-probs logged": 1,
        "other scaffold version": 1,
    }


def test_selection_refuses_what_it_cannot_train_on(tmp_path):
    with pytest.raises(FinetuneError, match="not an evolve run"):
        select_trajectories(tmp_path)
    with pytest.raises(FinetuneError, match="no trainable trajectories"):
        select_trajectories(_run(tmp_path / "a", [_logged("t-val", task="held")]))
    mixed = [_logged("t-a"), _logged("t-b", sampling={"temperature": 1.0})]
    with pytest.raises(FinetuneError, match="different temperatures"):
        select_trajectories(_run(tmp_path / "b", mixed))


def test_replay_takes_runs_at_most_max_staleness_versions_old(tmp_path):
    for iteration, version in ((1, 0), (2, 1), (3, 2)):
        out = tmp_path / "rollouts" / f"it-{iteration:03d}"
        out.mkdir(parents=True)
        traj = _logged(f"t-{iteration}")
        traj.metadata["policy_version"] = version
        traj.save(out / f"t-{iteration}.json")
    fresh = replay_batch(tmp_path, 3, current_version=2, max_staleness=0)
    assert sorted(p.name for p in fresh.iterdir()) == ["t-3.json"]
    stale = replay_batch(tmp_path, 4, current_version=2, max_staleness=1)
    assert sorted(p.name for p in stale.iterdir()) == ["t-2.json", "t-3.json"]


def test_pass_at_1_averages_seeds_per_task_then_tasks():
    runs = [make_trajectory("a", task_id="x", passed=True), make_trajectory("b", task_id="x", passed=False),
            make_trajectory("c", task_id="y", passed=True)]  # fmt: skip
    score, (low, high) = pass_at_1(runs)
    assert score == pytest.approx(0.75)
    assert low <= score <= high
