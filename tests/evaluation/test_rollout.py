"""run_task / run_tasks: agent in a prepared sandbox, judged in a fresh one, cached, stored."""

from __future__ import annotations

import json

import pytest

from recreate.domains import get_domain
from recreate.evaluation import RolloutCache, bootstrap_ci, run_task, run_tasks, summarize
from recreate.experience.store import ExperienceStore
from recreate.models import Budget, BudgetExceeded, UsageLedger
from tests.evaluation.conftest import EVALUATOR, EXAMPLE, MINIMAL, solver, write_tasks

pytestmark = pytest.mark.bwrap


@pytest.fixture
def domain(tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", 4)
    return get_domain("jsonl", data=data, evaluator=EVALUATOR, evaluator_dir=EXAMPLE)


def test_run_task_evaluates_in_a_fresh_sandbox_caches_and_stores(openai_server, bwrap, domain, tmp_path):
    openai_server.responder = solver(wrong={"add_1"})
    store = ExperienceStore(tmp_path / "experience", index=False)
    cache = RolloutCache(tmp_path / "rollouts")
    task = domain.tasks("all")[0]
    model = f"scripted@{openai_server.url}"

    traj = run_task(MINIMAL, task, domain, model=model, sandbox=bwrap, seed=3, store=store, cache=cache,
                    run_id="r1", trajectory_dir=tmp_path / "traj")  # fmt: skip
    assert traj.evaluation.passed and traj.evaluation.score == 1.0
    assert traj.outcome.exit_status == "submitted" and traj.seed == 3 and traj.run_id == "r1"
    assert traj.domain == "jsonl" and traj.task_id == "add-0"
    assert store.get(traj.trajectory_id).evaluation.passed
    key = traj.metadata["rollout_key"]
    assert cache.get(traj.scaffold.hash, "add-0", 3, key).trajectory_id == traj.trajectory_id

    calls = len(openai_server.requests)
    again = run_task(MINIMAL, task, domain, model=model, sandbox=bwrap, seed=3, store=store, cache=cache)
    assert again.trajectory_id == traj.trajectory_id and len(openai_server.requests) == calls  # cached
    other_seed = run_task(MINIMAL, task, domain, model=model, sandbox=bwrap, seed=4, cache=cache)
    assert other_seed.trajectory_id != traj.trajectory_id

    wrong = run_task(MINIMAL, domain.tasks("all")[1], domain, model=model, sandbox=bwrap, cache=cache)
    assert not wrong.evaluation.passed and "add_1(*[1]) returned 3, expected 2" in wrong.evaluation.feedback


def test_run_tasks_bounded_concurrency_and_summary(openai_server, bwrap, domain, tmp_path):
    openai_server.responder = solver(wrong={"add_2"})
    results = run_tasks(
        MINIMAL, domain.tasks("all"), domain, model=f"scripted@{openai_server.url}", sandbox=bwrap,
        concurrency=2, progress=False, cache=RolloutCache(tmp_path / "rollouts"), trajectory_dir=tmp_path,
    )  # fmt: skip
    assert [t.task_id for t in results] == ["add-0", "add-1", "add-2", "add-3"]
    summary = summarize(results)
    assert summary.tasks == 4 and summary.pass_at_1 == 0.75
    assert summary.pass_at_1_ci[0] <= 0.75 <= summary.pass_at_1_ci[1]
    assert summary.cost_per_task_usd == pytest.approx(0.002)  # two calls of $0.001 per task
    assert summary.exit_statuses == {"submitted": 4}


def test_a_crashing_evaluator_scores_zero_with_the_reason(openai_server, bwrap, tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", 1)

    def judge(task, submission):
        raise RuntimeError("judge is broken")

    domain = get_domain("jsonl", data=data, evaluator=judge)
    openai_server.responder = solver()
    traj = run_task(MINIMAL, domain.tasks("all")[0], domain, model=f"scripted@{openai_server.url}",
                    sandbox=bwrap, cache=False, trajectory_dir=tmp_path)  # fmt: skip
    assert traj.evaluation.score == 0 and not traj.evaluation.passed
    assert "judge is broken" in traj.evaluation.feedback


def test_shared_budget_stops_scheduling_and_caches_nothing_half_done(openai_server, bwrap, domain, tmp_path):
    openai_server.responder = solver()
    ledger = UsageLedger(budget=Budget(max_calls=3))
    cache = RolloutCache(tmp_path / "rollouts")
    with pytest.raises(BudgetExceeded):
        run_tasks(
            MINIMAL, domain.tasks("all"), domain, model=f"scripted@{openai_server.url}", sandbox=bwrap,
            concurrency=1, ledger=ledger, cache=cache, progress=False, trajectory_dir=tmp_path,
        )  # fmt: skip
    assert len(list(cache.root.rglob("*.json"))) == 1  # task 1 finished; task 2 hit the budget mid-run


def test_bootstrap_ci_brackets_the_mean_and_is_reproducible():
    values = [1.0] * 30 + [0.0] * 10
    low, high = bootstrap_ci(values, seed=1)
    assert low < 0.75 < high and (low, high) == bootstrap_ci(values, seed=1)
    assert bootstrap_ci([1.0, 1.0]) == (1.0, 1.0)


def test_a_task_whose_files_cannot_be_prepared_scores_zero_with_the_reason(openai_server, bwrap, tmp_path):
    data = tmp_path / "tasks.jsonl"
    row = {"id": "escape", "task": "t", "files": {"../../outside.txt": "x"}, "expected": "1"}
    data.write_text(json.dumps(row) + "\n")
    domain = get_domain("jsonl", data=data, evaluator=EVALUATOR, evaluator_dir=EXAMPLE)
    traj = run_task(MINIMAL, domain.tasks("all")[0], domain, model=f"scripted@{openai_server.url}",
                    sandbox=bwrap, cache=False)  # fmt: skip
    assert traj.outcome.exit_status == "error" and openai_server.requests == []
    assert traj.evaluation.score == 0 and "failed before the agent ran" in traj.evaluation.feedback
