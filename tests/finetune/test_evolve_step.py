"""`--finetune-every`: the evolve loop fine-tunes the real embedded model on its own training-task runs
and gates the new policy version on held-out tasks (the optimizer's choices are scripted; the agent,
sampling, training, publishing and serving are real)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.experience.store import ExperienceStore
from recreate.finetune import FinetuneSettings, FinetuneStep, ServedPolicy
from recreate.local import local_agent_options
from recreate.optimizer import EvolveConfig, ReCreateOptimizer
from recreate.optimizer.report import write_report
from recreate.scaffold import load_scaffold
from recreate.scaffold.model import Example
from recreate.testing import text
from tests.conftest import REPO

pytestmark = pytest.mark.slow
MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def _scaffold():
    seed = load_scaffold(REPO / "scaffolds" / "minimal")
    examples = [
        Example(task=f"What is {a} + {b}?", steps=[{"command": f"echo {MARKER}; echo $(({a} + {b}))"}])
        for a, b in ((3, 4), (25, 17))
    ]
    limits = seed.limits.model_copy(update={"max_steps": 2})
    return seed.model_copy(update={"examples": examples, "limits": limits, "action_format": "text"})


@pytest.mark.timeout(1200)  # sampling, training and publishing the 135M model: minutes on a busy 2-core box
def test_the_loop_fine_tunes_the_agent_model_and_gates_the_new_version(
    hf_model, recreate_home, openai_server, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="recreate.progress")
    openai_server.responder = lambda body: text("No change is needed.")  # the meta-agent proposes nothing
    data = tmp_path / "sums.jsonl"
    pairs = [(31, 45), (12, 66), (58, 23), (40, 37)]
    rows = [
        {"id": f"s{a}-{b}", "problem": f"What is the sum of {a} and {b}?", "answer": str(a + b)}
        for a, b in pairs
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    domain = get_domain("math", data=data)
    tasks = domain.tasks("all")
    train, val = tasks[:2], tasks[2:]
    run_dir = recreate_home / "runs" / "ft-run"
    policy = ServedPolicy(recreate_home, run_dir / "policy", parallel=4, base=hf_model)
    step = FinetuneStep(
        policy, FinetuneSettings(every=1, steps=1, lora_r=4, group_size=4, max_length=768, val_seeds=1)
    )
    with policy:
        opt = ReCreateOptimizer(
            optimizer_model=f"scripted@{openai_server.url}", agent_model=policy.server.info.spec,
            agent_options={**local_agent_options(policy.server.info), "max_tokens": 40}, finetune=step,
            home=recreate_home, experience=ExperienceStore(recreate_home / "experience", embedding="hash"),
            config=EvolveConfig(rounds=1, batch_size=2), max_concurrency=4,
        )  # fmt: skip
        result = opt.optimize(seed=_scaffold(), domain=domain, trainset=train, valset=val, run_id="ft-run")
        served = policy.server.info.model
        again = opt.optimize(seed=_scaffold(), domain=domain, trainset=train, valset=val, run_id="ft-run")
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
        assert served == kept == result.final_model == policy.current.name
        assert [v.name for v in ServedPolicy(recreate_home, run_dir / "policy", base=hf_model).versions][
            -1
        ] == kept
        val_runs = [t for t in opt.experience.list() if t.task_id in entry["val"]]
        assert {t.model for t in val_runs} >= {base, candidate}  # each side sampled from its own weights
    said = [r.getMessage() for r in caplog.records if r.name == "recreate.progress"]
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
