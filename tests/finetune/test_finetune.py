"""`recreate finetune` end to end on the real embedded model: logged runs -> a TAPO step -> a served
policy version -> the base and the new version evaluated on the same held-out task and seeds."""

from __future__ import annotations

import json

import pytest

from recreate.domains import get_domain
from recreate.evaluation import Rollouts
from recreate.finetune.offline import finetune
from recreate.local import local_agent_options, start_server
from recreate.sandbox import get_sandbox
from recreate.scaffold import load_scaffold
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_finetune_trains_on_a_runs_logs_and_compares_base_and_tuned(hf_model, tmp_path):
    sandbox = get_sandbox("bwrap")
    if not sandbox.available()[0]:
        pytest.skip("bubblewrap unavailable")
    home = hf_model.parents[1]
    data = tmp_path / "sums.jsonl"
    rows = [{"id": f"s{a}", "problem": f"What is {a} + 1?", "answer": str(a + 1)} for a in (3, 5, 7)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    domain = get_domain("math", data=data)
    train, held = domain.tasks("all")[:2], domain.tasks("all")[2:]
    seed = load_scaffold(REPO / "scaffolds" / "minimal")
    scaffold = seed.model_copy(update={"limits": seed.limits.model_copy(update={"max_steps": 1})})
    run = tmp_path / "runs" / "r1"
    server = start_server(tmp_path, engine="llamacpp", parallel=2)
    try:
        options = {**local_agent_options(server.info), "max_tokens": 24}
        runner = Rollouts(scaffold, domain, model=server.info.spec, sandbox=sandbox, cache=False,
                          trajectory_dir=run / "trajectories", **options)  # fmt: skip
        logged = runner.run_many(train, seeds=[0, 1], concurrency=2, progress=False)
    finally:
        server.stop()
    for traj in logged:  # the evaluator's choice, scripted: one run of each task passed, one failed
        traj.evaluation.score = float(traj.seed == 0)
        traj.save(run / "trajectories" / f"{traj.trajectory_id}.json")
    (run / "config.json").write_text(
        json.dumps({"train": [t.id for t in train], "val": [t.id for t in held]})
    )

    report = finetune(
        run_dir=run, home=home, scaffold=scaffold, domain=domain, val_tasks=held, steps=1, val_seeds=1,
        sandbox=sandbox, log=lambda _: None,
    )  # fmt: skip
    assert report.selected == 4 and report.temperature == 0.7
    assert "+ft1-" in report.policy and report.tasks == 1
    for side in (report.base, report.tuned):
        assert 0.0 <= side["pass_at_1"] <= 1.0 and side["tokens"] > 0
    assert "loss" in report.train_metrics
    saved = json.loads((run / "finetune" / "report.json").read_text())
    assert saved["policy"] == report.policy
    tuned_runs = list((run / "finetune" / "eval-tuned").glob("*.json"))
    assert tuned_runs and all(json.loads(p.read_text())["model"]["name"] == report.policy for p in tuned_runs)
    assert report.parent == hf_model.name

    again = finetune(
        run_dir=run, home=home, scaffold=scaffold, domain=domain, val_tasks=held, steps=1, val_seeds=1,
        sandbox=sandbox, log=lambda _: None,
    )  # fmt: skip
    assert again.parent == report.policy and "+ft2-" in again.policy  # on top of the first, and says so
    metrics = (run / "finetune" / "train" / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 1  # this attempt's step only
