"""`--finetune-every`: the evolve loop fine-tunes the real embedded model on its own training-task runs
and gates the new policy version on held-out tasks (the optimizer's choices are scripted; the agent,
sampling, training, publishing and serving are real). The run is the session's shared short main job
(tests/main_job.py), whose home the UI tests browse too."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from recreate.finetune import FinetuneSettings, ServedPolicy
from recreate.optimizer.report import write_report
from tests.main_job import MainJobRun

pytestmark = pytest.mark.slow


@pytest.mark.timeout(1200)  # sampling, training and publishing the 135M model: minutes on a busy 2-core box
def test_the_loop_fine_tunes_the_agent_model_and_gates_the_new_version(main_job_run: MainJobRun) -> None:
    run, recreate_home, hf_model = main_job_run, main_job_run.home, main_job_run.base
    result, again, served, train, val = run.result, run.resumed, run.served, run.train, run.val
    run_dir = recreate_home / "runs" / run.run_id
    assert again.final_model == result.final_model  # resumable whichever version the run ended on

    assert result.finished and len(result.models) == 1
    entry = result.models[0]
    base = hf_model.name
    assert entry["round"] == 1 and entry["parent"] == base and entry["trajectories"] == 8
    assert result.history[0]["model"] == base and result.history[1]["model"] == base
    sampled = [
        json.loads(p.read_text()) for p in (run_dir / "finetune" / "round-001" / "data").glob("*.json")
    ]
    assert len(sampled) == 8 and {t["task_id"] for t in sampled} == {t.id for t in train}  # never val
    assert all(t["model"]["name"] == base and t["steps"][0]["logprobs"] for t in sampled)
    if entry.get("gate") is None:  # every group had equal rewards: nothing to learn, nothing published
        assert "nothing to learn" in entry["reason"] and served == base and result.final_model == base
    else:
        candidate = entry["model"]
        assert candidate.startswith(f"{base}+ft1-") and entry["gate"]["n"] == 2 and "loss" in entry["train"]
        train_dir = run_dir / "finetune" / "round-001" / "train"
        assert (train_dir / "final" / "adapter_config.json").is_file()
        assert not (train_dir / "checkpoints").exists()  # resume state, dropped once the adapter is written
        assert set(entry["val"]) == set(entry["parent_val"]) == {t.id for t in val}  # paired, held out
        kept = candidate if entry["accepted"] else base
        assert served == kept == result.final_model == run.current
        assert [v.name for v in ServedPolicy(recreate_home, run_dir / "policy", base=hf_model).versions][
            -1
        ] == kept
        val_runs = [t for t in run.experience.list() if t.task_id in entry["val"]]
        assert {t.model for t in val_runs} >= {base, candidate}  # each side sampled from its own weights
    said = run.progress
    assert "round 1: fine-tuning smollm2" in " ".join(said).lower()
    assert "round 1: fine-tuning: 8 runs to train on (2 tasks × 4)" in said, said
    assert any(line.startswith("round 1: fine-tuning (8 runs, mean reward") for line in said), said
    report = write_report(result, result.run_dir / "report").read_text()
    assert "Scaffold version × model version" in report and base in report
    assert re.search(r"\d\.\d{3} <small>\(\d+ runs\)</small>", report)  # each pair's mean and its runs


def test_a_step_trains_the_steps_asked_for_also_on_fewer_batches_of_runs(tmp_path: Path) -> None:
    from recreate.finetune.evolve_step import train_config

    config = train_config(FinetuneSettings(every=1, steps=8), tmp_path / "train", "round-001")
    batches = 2  # two training tasks of a round, 4 runs each: 2 batches of 4 (the trainer's batch size)
    assert config.batch_size == 4 and config.max_steps == 8
    assert min(config.epochs * batches, config.max_steps) == 8  # the trainer's step count: not 2
