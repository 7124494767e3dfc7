"""Adversarial probes of the score's integrity: what the gate decides on, what counts as a score and what
the rollout cache key names (each a defect found by a hostile review, kept as a regression test)."""

from __future__ import annotations

import functools
import importlib
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.evaluation import RolloutCache, Rollouts, run_task
from recreate.evaluation.cache import settings_fingerprint
from recreate.evaluation.stats import paired_gate
from recreate.testing.openai_server import Reply
from tests.evaluation.conftest import EVALUATOR, EXAMPLE, MINIMAL, solver, write_tasks


@pytest.fixture
def domain(tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", 2)
    return get_domain("jsonl", data=data, evaluator=EVALUATOR, evaluator_dir=EXAMPLE)


# -- the gate ----------------------------------------------------------------------------------------
def test_one_paired_task_is_no_test_even_when_the_candidate_wins_it() -> None:
    """E.g. five validation tasks of which four errored for the candidate: the one pair left has no
    interval (the bootstrap of one value is that value), so it cannot show a reliable improvement."""
    verdict = paired_gate({"a": 0.0, "b": 0.0, "c": 0.0}, {"a": 1.0})
    assert verdict.tasks == 1 and not verdict.accepted
    assert "too few" in verdict.reason
    several_seeds = paired_gate({f"a#{s}": 0.0 for s in range(4)}, {f"a#{s}": 1.0 for s in range(4)})
    assert several_seeds.n == 4 and several_seeds.tasks == 1 and not several_seeds.accepted


def test_a_gate_most_of_whose_runs_errored_decides_nothing() -> None:
    """Twenty validation runs asked for, seven scored for both versions (the rest errored: not a random
    sample of the tasks): the seven cannot accept the candidate, however clearly they favour it."""
    parent = {f"t{i}": 0.0 for i in range(20)}
    candidate = {f"t{i}": 1.0 for i in range(7)}
    assert paired_gate(parent, candidate).accepted  # without the count asked for: seven clear wins
    verdict = paired_gate(parent, candidate, asked=20)
    assert not verdict.accepted and "only 7 of 20 validation runs" in verdict.reason
    half = {f"t{i}": 1.0 for i in range(10)}
    assert paired_gate(parent, half, asked=20).accepted  # half of them scored: a test


def test_a_tie_on_one_task_does_not_promote_the_smaller_scaffold() -> None:
    verdict = paired_gate({"a": 1.0}, {"a": 1.0}, parent_size=100, candidate_size=10)
    assert not verdict.accepted


# -- what is no score ------------------------------------------------------------------------------
@pytest.mark.bwrap
@pytest.mark.parametrize("body", ["{not json", '{"error": {"message": "overloaded"}}'])
def test_a_malformed_model_response_is_an_endpoint_error_not_a_zero(
    openai_server, bwrap, domain, tmp_path, body
):
    """A 200 whose body is not a completion (a proxy's error page, a truncated body) is the endpoint's
    failure, as a 5xx is: no score, nothing cached, run again next time."""
    openai_server.responder = lambda request: Reply(raw_body=body)
    cache, model = RolloutCache(tmp_path / "rollouts"), f"scripted@{openai_server.url}"
    task = domain.tasks("all")[0]
    failed = run_task(MINIMAL, task, domain, model=model, sandbox=bwrap, cache=cache, trajectory_dir=tmp_path)
    assert failed.outcome.exit_status == "error" and failed.messages
    assert failed.evaluation is None and failed.metadata.get("rollout_error") == "endpoint"
    assert not list(cache.root.rglob("*.json"))


@pytest.mark.bwrap
def test_a_failure_after_the_models_reply_is_still_the_runs_own(openai_server, bwrap, domain, tmp_path):
    """The structural rule above looks at where the run broke off: a run that got its reply and then
    failed (here: no submission within the step limit is not an error at all) keeps its score."""
    openai_server.responder = lambda request: Reply(content="thinking, no action")
    traj = run_task(MINIMAL, domain.tasks("all")[0], domain, model=f"scripted@{openai_server.url}",
                    sandbox=bwrap, cache=False, trajectory_dir=tmp_path)  # fmt: skip
    assert "rollout_error" not in traj.metadata and traj.evaluation is not None


# -- the cache key -----------------------------------------------------------------------------------
def _key(domain, url: str, **options) -> str:
    runner = Rollouts(MINIMAL, domain, model=f"scripted@{url}", sandbox="local", cache=False, **options)
    return runner.rollout_key(domain.tasks("all")[0])


def test_the_cache_key_names_the_action_format_the_agent_runs_with(openai_server, domain):
    """`action_format` (tool calls or text actions) changes every prompt and parse: another rollout."""
    assert _key(domain, openai_server.url, action_format="text") != _key(
        domain, openai_server.url, action_format="tool_calls"
    )


def test_the_cache_key_names_structured_sampling_options(openai_server, domain):
    """extra_body values that are not plain scalars (a chat template's switches) change the samples."""
    thinking = {"chat_template_kwargs": {"enable_thinking": True}}
    plain = {"chat_template_kwargs": {"enable_thinking": False}}
    assert _key(domain, openai_server.url, extra_body=thinking) != _key(
        domain, openai_server.url, extra_body=plain
    )


def _judge(task, submission, *, threshold: float) -> float:
    return 1.0 if len(submission) >= threshold else 0.0


def _make_judge(threshold: float):
    def judge(task, submission):
        return 1.0 if len(submission) >= threshold else 0.0

    return judge


class _Judge:
    def __init__(self, threshold: float):
        self.threshold = threshold

    def __call__(self, task, submission):
        return 1.0 if len(submission) >= self.threshold else 0.0


@pytest.mark.parametrize(
    "lenient, strict",
    [
        (functools.partial(_judge, threshold=1), functools.partial(_judge, threshold=10**6)),
        (_make_judge(1), _make_judge(10**6)),
        (_Judge(1), _Judge(10**6)),
    ],
    ids=["partial", "closure", "callable-object"],
)
def test_a_python_evaluators_bound_settings_are_part_of_the_key(tmp_path, lenient, strict):
    data = write_tasks(tmp_path / "tasks.jsonl", 1)
    one = settings_fingerprint(get_domain("jsonl", data=data, evaluator=lenient))
    other = settings_fingerprint(get_domain("jsonl", data=data, evaluator=strict))
    assert one != other
    again = settings_fingerprint(get_domain("jsonl", data=data, evaluator=lenient))
    assert one == again  # stable: no addresses or ids of objects in it


HELPERS = """
PASS_AT = {pass_at}


def long_enough(submission):
    return len(submission) >= PASS_AT
"""
JUDGE = """
import {helpers} as helpers
from {helpers} import long_enough

LIMIT = {limit}


def judge(task, submission):
    return 1.0 if long_enough(submission) and len(submission) < LIMIT and helpers.PASS_AT else 0.0
"""


def _evaluator_from_files(folder: Path, name: str, *, pass_at: int, limit: int, monkeypatch) -> object:
    """A Python evaluator whose verdicts hang on a constant of its module and on a helper module."""
    folder.mkdir(exist_ok=True)
    (folder / f"{name}_helpers.py").write_text(HELPERS.format(pass_at=pass_at))
    (folder / f"{name}.py").write_text(JUDGE.format(helpers=f"{name}_helpers", limit=limit))
    monkeypatch.syspath_prepend(str(folder))
    for module in (name, f"{name}_helpers"):
        sys.modules.pop(module, None)
    return importlib.import_module(name).judge


def test_what_a_python_evaluator_reads_beyond_its_source_is_part_of_the_key(tmp_path, monkeypatch):
    """The function's source is the same in every case; its module's constant, its helper's constant
    and its helper module's file are not, and each decides the verdicts."""
    data = write_tasks(tmp_path / "tasks.jsonl", 1)

    def key(pass_at: int, limit: int, name: str = "judge_a") -> dict:
        judge = _evaluator_from_files(
            tmp_path / name, name, pass_at=pass_at, limit=limit, monkeypatch=monkeypatch
        )
        return settings_fingerprint(get_domain("jsonl", data=data, evaluator=judge))

    base = key(1, 100)
    assert key(1, 100) == base  # re-imported: the same key (no addresses)
    assert key(1, 5) != base  # the module's constant
    assert key(10**6, 100) != base  # the helper's constant (read through the imported helper and module)
    assert key(1, 100, name="judge_b") != base  # another module


@pytest.mark.bwrap
def test_a_changed_closure_evaluator_is_a_cache_miss_end_to_end(openai_server, bwrap, tmp_path):
    openai_server.responder = solver()
    data = write_tasks(tmp_path / "tasks.jsonl", 1)
    cache, model = RolloutCache(tmp_path / "rollouts"), f"scripted@{openai_server.url}"
    lenient = get_domain("jsonl", data=data, evaluator=_make_judge(1))
    strict = get_domain("jsonl", data=data, evaluator=_make_judge(10**6))
    task = lenient.tasks("all")[0]
    first = run_task(MINIMAL, task, lenient, model=model, sandbox=bwrap, cache=cache, trajectory_dir=tmp_path)
    assert first.evaluation.score == 1.0
    second = run_task(MINIMAL, task, strict, model=model, sandbox=bwrap, cache=cache, trajectory_dir=tmp_path)
    assert second.trajectory_id != first.trajectory_id and second.evaluation.score == 0.0


@pytest.mark.bwrap
def test_a_fixed_evaluator_script_is_a_cache_miss(openai_server, bwrap, tmp_path, request):
    """The command reads the same (`python3 /evaluator/evaluate.py`), the script it runs does not: a
    result judged by the old script is not a result of the new one."""
    openai_server.responder = solver()
    folder = Path(tempfile.mkdtemp(prefix="recreate-evaluator-test-"))  # readable by the sandbox's uid
    folder.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(folder, ignore_errors=True))
    script = folder / "evaluate.py"
    script.write_text((EXAMPLE / "evaluate.py").read_text())
    data = write_tasks(tmp_path / "tasks.jsonl", 1)
    domain = get_domain("jsonl", data=data, evaluator=EVALUATOR, evaluator_dir=folder)
    cache, model = RolloutCache(tmp_path / "rollouts"), f"scripted@{openai_server.url}"
    task = domain.tasks("all")[0]
    first = run_task(MINIMAL, task, domain, model=model, sandbox=bwrap, cache=cache, trajectory_dir=tmp_path)
    assert first.evaluation.passed
    script.write_text('print(\'{"score": 0, "feedback": "the fixed evaluator"}\')\n')
    domain = get_domain("jsonl", data=data, evaluator=EVALUATOR, evaluator_dir=folder)
    second = run_task(MINIMAL, task, domain, model=model, sandbox=bwrap, cache=cache, trajectory_dir=tmp_path)
    assert second.trajectory_id != first.trajectory_id
    assert second.evaluation.score == 0 and second.evaluation.feedback == "the fixed evaluator"


def test_a_fixed_domain_checker_is_another_key(tmp_path, monkeypatch) -> None:
    """The domain's code, its sandboxed checks included, decides the verdicts: a release that fixes a
    checker must not reuse the verdicts the old one gave."""
    import importlib

    from recreate.evaluation.cache import settings_fingerprint

    package = tmp_path / "my_domain"
    (package / "checks").mkdir(parents=True)
    (package / "__init__.py").write_text("class MyDomain:\n    timeout = 5\n")
    (package / "checks" / "check.py").write_text("print('score 1')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    domain = importlib.import_module("my_domain").MyDomain()
    before = settings_fingerprint(domain)
    assert settings_fingerprint(domain) == before  # stable
    (package / "checks" / "check.py").write_text("print('score 0')\n")
    assert settings_fingerprint(domain)["code"] != before["code"]
