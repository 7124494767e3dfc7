"""run_task / run_tasks: agent in a prepared sandbox, judged in a fresh one, cached, stored."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest

from recreate.domains import get_domain
from recreate.evaluation import RolloutCache, bootstrap_ci, run_task, run_tasks, summarize
from recreate.evaluation.report import task_row
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


def test_an_evaluator_that_crashes_on_any_answer_is_an_error_not_a_zero(openai_server, bwrap, tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", 1)

    def judge(task, submission):
        raise RuntimeError("judge is broken")

    domain = get_domain("jsonl", data=data, evaluator=judge)
    openai_server.responder = solver()
    cache = RolloutCache(tmp_path / "rollouts")
    traj = run_task(MINIMAL, domain.tasks("all")[0], domain, model=f"scripted@{openai_server.url}",
                    sandbox=bwrap, cache=cache, trajectory_dir=tmp_path)  # fmt: skip
    assert traj.evaluation is None and traj.metadata["rollout_error"] == "evaluator"
    assert "judge is broken" in traj.metadata["rollout_error_reason"]
    assert summarize([traj]).rollouts == 0 and summarize([traj]).machine_errors == 1
    assert not list(cache.root.rglob("*.json"))  # retried next time


def test_an_evaluator_crash_the_submission_causes_scores_zero(openai_server, bwrap, tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", 1)

    def judge(task, submission):
        if "return" in submission:  # this submission trips the judge; a plain wrong answer does not
            raise RecursionError("maximum recursion depth exceeded")
        return 0.0

    domain = get_domain("jsonl", data=data, evaluator=judge)
    openai_server.responder = solver()
    traj = run_task(MINIMAL, domain.tasks("all")[0], domain, model=f"scripted@{openai_server.url}",
                    sandbox=bwrap, cache=False, trajectory_dir=tmp_path)  # fmt: skip
    assert traj.evaluation.score == 0 and not traj.evaluation.passed and "rollout_error" not in traj.metadata
    assert "RecursionError" in traj.evaluation.feedback  # the verdict stands: the submission did it


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
    data.write_text(json.dumps({"id": "escape", "task": "t", "expected": "1"}) + "\n")
    domain = get_domain("jsonl", data=data, evaluator=EVALUATOR, evaluator_dir=EXAMPLE)
    # a task file with such a path is refused at load; a Task built in Python reaches the rollout
    task = dataclasses.replace(domain.tasks("all")[0], files={"../../outside.txt": "x"})
    traj = run_task(MINIMAL, task, domain, model=f"scripted@{openai_server.url}", sandbox=bwrap, cache=False)
    assert traj.outcome.exit_status == "error" and openai_server.requests == []
    assert traj.evaluation.score == 0 and "failed before the agent ran" in traj.evaluation.feedback


def _idless_tasks(path, function: str, offset: int):
    """A tasks file whose one line has no id (so its id is derived from the file's name and line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    prompt = f"Write a Python function `{function}(x)` that returns x + {offset}."
    row = {"task": prompt, "function": function, "tests": [[[1], 1 + offset]]}
    path.write_text(json.dumps(row) + "\n")
    return get_domain("jsonl", data=path, evaluator=EVALUATOR, evaluator_dir=EXAMPLE)


def test_the_cache_key_names_the_task_content_not_only_its_id(openai_server, bwrap, tmp_path):
    openai_server.responder = solver()
    cache, model = RolloutCache(tmp_path / "rollouts"), f"scripted@{openai_server.url}"
    first = _idless_tasks(tmp_path / "a" / "tasks.jsonl", "add_0", 0)
    second = _idless_tasks(tmp_path / "b" / "tasks.jsonl", "add_5", 5)
    task_a, task_b = first.tasks("all")[0], second.tasks("all")[0]
    assert task_a.id == task_b.id  # same derived id, different tasks
    a = run_task(MINIMAL, task_a, first, model=model, sandbox=bwrap, cache=cache, trajectory_dir=tmp_path)
    calls = len(openai_server.requests)
    b = run_task(MINIMAL, task_b, second, model=model, sandbox=bwrap, cache=cache, trajectory_dir=tmp_path)
    assert len(openai_server.requests) > calls and b.trajectory_id != a.trajectory_id  # not a's result
    assert "add_5" in b.outcome.submission and b.evaluation.passed

    def judge(task, submission):
        return {"score": 0.5, "feedback": "another evaluator"}

    other_evaluator = get_domain("jsonl", data=tmp_path / "a" / "tasks.jsonl", evaluator=judge)
    again = run_task(MINIMAL, task_a, other_evaluator, model=model, sandbox=bwrap, cache=cache)
    assert again.trajectory_id != a.trajectory_id and again.evaluation.score == 0.5
    assert (
        run_task(MINIMAL, task_a, first, model=model, sandbox=bwrap, cache=cache).trajectory_id
        == a.trajectory_id
    )


def test_an_endpoint_error_is_stored_but_not_scored_or_cached(openai_server, bwrap, domain, tmp_path):
    from recreate.evaluation.errors import is_endpoint_error
    from recreate.testing import Reply

    openai_server.responder = lambda body: Reply(status=400)
    store = ExperienceStore(tmp_path / "experience", index=False)
    cache, model = RolloutCache(tmp_path / "rollouts"), f"scripted@{openai_server.url}"
    task = domain.tasks("all")[0]
    failed = run_task(MINIMAL, task, domain, model=model, sandbox=bwrap, cache=cache, store=store)
    assert failed.outcome.exit_status == "error" and failed.evaluation is None and is_endpoint_error(failed)
    assert store.get(failed.trajectory_id).metadata["rollout_error"] == "endpoint"  # on record
    assert not list(cache.root.rglob("*.json"))  # not a result
    summary = summarize([failed])
    assert summary.endpoint_errors == 1 and summary.rollouts == 0  # not a score of 0
    assert task_row(failed)["error"] == "endpoint" and task_row(failed)["score"] is None

    openai_server.responder = solver()
    retried = run_task(MINIMAL, task, domain, model=model, sandbox=bwrap, cache=cache)
    assert retried.evaluation.passed  # the next attempt runs it again


def test_a_prompt_overflowing_the_context_is_the_runs_outcome(openai_server, bwrap, domain, tmp_path):
    from recreate.testing import Reply

    overflow = "This model's maximum context length is 2048 tokens. However, you requested 9000 tokens."
    openai_server.responder = lambda body: Reply(status=400, error=overflow)
    cache = RolloutCache(tmp_path / "rollouts")
    traj = run_task(MINIMAL, domain.tasks("all")[0], domain, model=f"scripted@{openai_server.url}",
                    sandbox=bwrap, cache=cache)  # fmt: skip
    assert traj.outcome.exit_status == "context_exceeded" and "rollout_error" not in traj.metadata
    assert traj.evaluation.score == 0
    assert traj.evaluation.feedback.startswith("no submission: the prompt alone does not fit")
    assert "maximum context length" in traj.evaluation.feedback
    assert len(list(cache.root.rglob("*.json"))) == 1  # a result like any other


def test_a_conversation_outgrowing_the_context_ends_the_run_in_one_log_line(
    openai_server, bwrap, domain, tmp_path, caplog
):
    from recreate.testing import Reply

    overflow = "request (4141 tokens) exceeds the available context size (4096 tokens), try increasing it"
    replies = iter([Reply(content="```bash\nls\n```"), Reply(content="```bash\nls -la\n```")])
    openai_server.responder = lambda body: next(replies, None) or Reply(status=400, error=overflow)
    with caplog.at_level(logging.DEBUG, logger="recreate"):
        traj = run_task(MINIMAL, domain.tasks("all")[0], domain, model=f"scripted@{openai_server.url}",
                        sandbox=bwrap, action_format="text")  # fmt: skip
    assert traj.outcome.exit_status == "context_exceeded" and traj.totals.steps == 2
    assert traj.evaluation.score == 0 and "outgrew it after 2 model calls" in traj.evaluation.feedback
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # a run's outcome, not a failure


def test_the_runs_trajectory_file_holds_its_evaluation(openai_server, bwrap, domain, tmp_path) -> None:
    from recreate.experience.schema import load_trajectory

    openai_server.responder = solver(wrong={"add_1"})
    model, logs = f"scripted@{openai_server.url}", tmp_path / "run" / "trajectories"
    results = run_tasks(MINIMAL, domain.tasks("all")[:2], domain, model=model, sandbox=bwrap, progress=False,
                        cache=False, trajectory_dir=logs)  # fmt: skip
    for traj in results:  # what `recreate finetune --run` reads: scored as the run scored it
        saved = load_trajectory(json.loads((logs / f"{traj.trajectory_id}.json").read_text()))
        assert saved.evaluation is not None and saved.evaluation.score == traj.evaluation.score
    assert sorted(t.evaluation.score for t in results) == [0.0, 1.0]
    assert not list(logs.glob("*.steps.jsonl"))
