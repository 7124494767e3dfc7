"""An agent endpoint that goes down mid-run is no score and no reason to go on: the same endpoint failure
three rollouts in a row stops the run, resumably (`EndpointDown`), instead of spending its rounds on
errors; a refusal of one request (a 400) says the endpoint is up and stops nothing."""

from __future__ import annotations

import pytest

from recreate.domains import get_domain
from recreate.evaluation import RolloutCache, Rollouts
from recreate.evaluation.errors import EndpointDown, RunHalted, is_endpoint_error
from recreate.testing import Reply
from tests.evaluation.conftest import EVALUATOR, EXAMPLE, MINIMAL, solver, write_tasks

pytestmark = pytest.mark.bwrap


@pytest.fixture
def runner(openai_server, bwrap, tmp_path, monkeypatch):
    monkeypatch.setenv("RECREATE_MAX_RETRIES", "0")  # the client's retries would only slow the test
    domain = get_domain("jsonl", data=write_tasks(tmp_path / "tasks.jsonl", 6), evaluator=EVALUATOR,
                        evaluator_dir=EXAMPLE)  # fmt: skip
    openai_server.responder = solver()
    cache = RolloutCache(tmp_path / "rollouts")
    rollouts = Rollouts(MINIMAL, domain, model=f"scripted@{openai_server.url}", sandbox=bwrap, cache=cache,
                        trajectory_dir=tmp_path / "trajectories")  # fmt: skip
    return rollouts, domain.tasks("all")


def test_an_endpoint_that_dies_mid_run_stops_it_after_three_failed_rollouts(openai_server, runner, tmp_path):
    rollouts, tasks = runner
    scored = rollouts.run_many(tasks[:2], concurrency=1, progress=False)
    assert all(t.evaluation is not None and t.evaluation.passed for t in scored)
    openai_server.stop()  # the server dies: connections are refused from now on
    with pytest.raises(EndpointDown, match="3 rollouts in a row .*agent model's endpoint failed") as stop:
        rollouts.run_many(tasks[2:], concurrency=1, progress=False)
    assert isinstance(stop.value, RunHalted)  # the optimizer's and eval's resumable stop
    stored = [p for p in (tmp_path / "trajectories").glob("*.json")]
    assert len(stored) == 5  # 2 scored, 3 errors on record (none scored, none cached)
    assert len(list((tmp_path / "rollouts").rglob("*.json"))) == 2
    with pytest.raises(EndpointDown):  # no further attempt once stopped
        rollouts.run(tasks[5])


def test_server_errors_past_the_retries_stop_the_run_too(openai_server, runner):
    rollouts, tasks = runner
    openai_server.responder = lambda body: Reply(status=503)
    with pytest.raises(EndpointDown, match="503"):
        rollouts.run_many(tasks, concurrency=2, progress=False)


def test_refusals_of_one_request_are_errors_but_stop_nothing(openai_server, runner):
    rollouts, tasks = runner
    openai_server.responder = lambda body: Reply(status=400, error="this request is too long")
    results = rollouts.run_many(tasks, concurrency=1, progress=False)
    assert len(results) == 6 and all(is_endpoint_error(t) and t.evaluation is None for t in results)
    assert rollouts.endpoint_streak.halted is None


def test_a_success_between_failures_resets_the_count(openai_server, runner):
    rollouts, tasks = runner
    calls = {"n": 0}
    healthy = solver()

    def flaky(body):  # every third rollout fails at its first call (a rollout makes 2)
        calls["n"] += 1
        return Reply(status=503) if calls["n"] % 5 == 1 else healthy(body)

    openai_server.responder = flaky
    results = rollouts.run_many(tasks, concurrency=1, progress=False)
    assert any(is_endpoint_error(t) for t in results) and any(t.evaluation for t in results)
    assert rollouts.endpoint_streak.halted is None
