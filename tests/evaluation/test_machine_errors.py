"""A machine that fails is no score: rollouts whose sandbox stops opening (or whose evaluator's sandbox
does) are stored as errors, left out of the means, never cached, and the same failure three times in a
row stops the run, which resumes where it stopped once the machine works again."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recreate.domains import get_domain
from recreate.evaluation import RolloutCache, Rollouts, summarize
from recreate.evaluation.errors import MachineDown, RunHalted, is_rollout_error
from recreate.evaluation.machine import MachineStreak
from recreate.evaluation.preflight import PreflightError, check_disk, preflight
from recreate.sandbox import SandboxError, SandboxSpec
from tests.evaluation.conftest import EVALUATOR, EXAMPLE, MINIMAL, solver, write_tasks

pytestmark = pytest.mark.bwrap


class BreaksAfter:
    """A real sandbox whose opens fail from the `limit`-th on (as a disk or a daemon gives out mid-run);
    `only` limits the failures to sessions whose spec matches (e.g. the evaluator's)."""

    def __init__(self, inner, limit: int, only=lambda spec: True) -> None:
        self.inner, self.only, self.name = inner, only, inner.name
        self._limit, self._opens, self._lock = limit, 0, threading.Lock()

    def open(self, spec: SandboxSpec | None = None):
        with self._lock:
            self._opens += 1
            broken = self._opens >= self._limit and self.only(spec or SandboxSpec())
        if broken:
            raise SandboxError("bubblewrap failed to start: Creating new namespace failed: No space left")
        return self.inner.open(spec)

    def available(self):
        return self.inner.available()


@pytest.fixture
def domain(tmp_path):
    return get_domain("jsonl", data=write_tasks(tmp_path / "tasks.jsonl", 6), evaluator=EVALUATOR,
                      evaluator_dir=EXAMPLE)  # fmt: skip


def _rollouts(sandbox, domain, url, tmp_path) -> Rollouts:
    cache = RolloutCache(tmp_path / "rollouts")
    return Rollouts(MINIMAL, domain, model=f"scripted@{url}", sandbox=sandbox, cache=cache,
                    trajectory_dir=tmp_path / "trajectories")  # fmt: skip


def test_a_sandbox_that_breaks_mid_run_gives_errors_then_a_resumable_stop(
    openai_server, bwrap, domain, tmp_path
):
    openai_server.responder = solver()
    tasks = domain.tasks("all")
    broken = BreaksAfter(bwrap, limit=5)  # two rollouts (agent + evaluator sessions) work, then none
    runner = _rollouts(broken, domain, openai_server.url, tmp_path)
    with pytest.raises(MachineDown, match="3 rollouts in a row .*No space left") as stop:
        runner.run_many(tasks, concurrency=1, progress=False)
    assert isinstance(stop.value, RunHalted)  # the optimizer's resumable stop
    stored = {p.name for p in (tmp_path / "trajectories").glob("*.json")}
    assert len(stored) == 5  # 2 scored + 3 errors, each on record
    with pytest.raises(MachineDown):  # no further attempt once stopped
        runner.run(tasks[5])
    assert broken._opens == 7  # a failed open is the machine's at once (nothing else had run): no probe

    broken._limit = 10**9  # the machine is fixed; the run resumes (a new process: a new runner)
    healthy = _rollouts(broken, domain, openai_server.url, tmp_path)
    calls = len(openai_server.requests)
    results = healthy.run_many(tasks, concurrency=1, progress=False)
    assert all(t.evaluation.passed and not is_rollout_error(t) for t in results)
    assert len(openai_server.requests) - calls == 2 * 4  # the 2 scored ones came from the cache


def test_errors_are_not_scores_and_a_success_resets_the_streak(openai_server, bwrap, domain, tmp_path):
    openai_server.responder = solver()
    tasks = domain.tasks("all")[:2]

    def evaluator_only(spec):  # the evaluator's sandbox, which the jsonl domain turns into a zero
        return any(target == "/evaluator" for _, target in spec.ro_binds)

    runner = _rollouts(BreaksAfter(bwrap, limit=1, only=evaluator_only), domain, openai_server.url, tmp_path)
    results = runner.run_many(tasks, concurrency=1, progress=False)
    assert all(t.evaluation is None and t.metadata["rollout_error"] == "machine" for t in results)
    assert "evaluation's bwrap sandbox failed" in results[0].metadata["rollout_error_reason"]
    summary = summarize(results)
    assert summary.rollouts == 0 and summary.machine_errors == 2 and summary.mean_score == 0.0
    assert not list((tmp_path / "rollouts").rglob("*.json"))  # nothing cached: retried next time
    assert runner.streak.halted is None  # two in a row, under the limit


@given(st.lists(st.sampled_from(["a", "b", None]), max_size=30))
def test_the_streak_stops_exactly_at_three_same_reasons_in_a_row(reasons):
    streak, run, expected_stop = MachineStreak(limit=3), [], None
    for i, reason in enumerate(reasons):
        run = [*run, reason] if reason is not None and run and run[-1] == reason else [reason]
        if reason is not None and len(run) >= 3:
            expected_stop = i
            break
    for i, reason in enumerate(reasons):
        if i == expected_stop:
            with pytest.raises(MachineDown):
                streak.record(f"sandbox failed on pid {1000 + i}: {reason}")  # numbers do not matter
            return
        streak.record(None if reason is None else f"sandbox failed on pid {1000 + i}: {reason}")
    assert expected_stop is None and streak.halted is None


def test_preflight_refuses_a_sandbox_that_cannot_run_true(domain, tmp_path):
    class NoSessions:
        name = "bwrap"

        def available(self):
            return True, "installed"

        def open(self, spec=None):
            raise SandboxError("bubblewrap failed to start: bwrap: setting up uid map: Permission denied")

    with pytest.raises(
        PreflightError, match=r"^sandbox bwrap: it cannot open a session: .*Permission denied"
    ):
        preflight(NoSessions(), domain, tmp_path)


def test_preflight_names_the_domain_environment_and_the_disk(bwrap, domain, tmp_path):
    domain.environment_problem = lambda: "the environment is missing: run `recreate domain setup x`"
    with pytest.raises(PreflightError, match="^domain jsonl: the environment is missing: run"):
        preflight(bwrap, domain, tmp_path)
    with pytest.raises(PreflightError, match="MB free .*pass another --home"):
        check_disk(Path(tmp_path / "not" / "made" / "yet"), min_free_mb=10**12)
