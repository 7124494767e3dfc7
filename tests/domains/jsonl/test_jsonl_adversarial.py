"""Adversarial checks of how the jsonl domain reads an evaluator's verdict."""

import json
import math
import textwrap
from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.domains.jsonl.domain import _last_json_line, as_evaluation


@pytest.fixture
def tasks_file(open_tmp: Path) -> Path:
    (open_tmp / "domain").mkdir(mode=0o755)
    path = open_tmp / "domain" / "tasks.jsonl"
    path.write_text(json.dumps({"id": "one", "task": "Say yes.", "expected": "yes"}) + "\n")
    return path


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x1c", "\x0c"])
def test_a_verdict_echoing_a_line_separator_is_still_read(separator):
    """str.splitlines() splits at these; json.dumps(ensure_ascii=False) leaves them raw in a string."""
    verdict = json.dumps({"score": 0, "feedback": f"got a{separator}b"}, ensure_ascii=False)
    assert _last_json_line(f"noise\n{verdict}\n") == {"score": 0, "feedback": f"got a{separator}b"}


@pytest.mark.bwrap
def test_a_submission_with_a_line_separator_cannot_turn_a_fail_into_a_pass(tasks_file, bwrap):
    """The evaluator says score 0 and exits 0; losing its verdict line would read exit 0 as a pass."""
    (tasks_file.parent / "judge.py").write_text(
        textwrap.dedent(
            """
            import json, pathlib
            answer = pathlib.Path("submission.txt").read_text()
            verdict = {"score": float(answer == "yes"), "feedback": "got " + answer}
            print(json.dumps(verdict, ensure_ascii=False))
            """
        )
    )
    domain = get_domain("jsonl", data=tasks_file, evaluator="python3 /evaluator/judge.py")
    task = domain.tasks()[0]
    assert domain.evaluate(task, "yes", bwrap).passed
    forged = domain.evaluate(task, "no\u2028", bwrap)
    assert forged.score == 0.0 and not forged.passed, forged.feedback


@pytest.mark.parametrize("score", [math.nan, math.inf, -math.inf])
def test_a_non_finite_score_is_an_error_not_a_score(score):
    for value in ({"score": score, "feedback": "mean of no tests"}, score):
        evaluation = as_evaluation(value)
        assert evaluation.score == 0.0 and not evaluation.passed
        assert "not a" in evaluation.details["error"] and str(score) in evaluation.feedback


def test_a_nan_verdict_line_from_a_command_is_an_error():
    reported = _last_json_line('{"score": NaN, "feedback": "no tests ran"}')
    evaluation = as_evaluation(reported)
    assert evaluation.score == 0.0 and "score nan" in evaluation.details["error"]


@pytest.mark.parametrize("passed", ["false", "no", None, [True]])
def test_a_passed_field_that_is_not_a_boolean_is_an_error(passed):
    """bool("false") is True: a verdict saying passed "false" must not count as a pass."""
    evaluation = as_evaluation({"score": 0, "passed": passed})
    assert not evaluation.passed and "report a JSON boolean" in evaluation.details["error"]


def test_boolean_and_numeric_passed_fields_still_count():
    assert as_evaluation({"score": 0.2, "passed": True}).passed
    assert not as_evaluation({"score": 1, "passed": 0}).passed


def test_jsonl_rows_holding_line_separators_read_back_whole(tmp_path):
    """`recreate.jsonl` writes ensure_ascii=False: a row's U+2028 must not split it in two (both lost)."""
    from recreate.jsonl import append_jsonl, read_jsonl

    path = tmp_path / "ledger.jsonl"
    rows = [{"note": "a\u2028b\x85c\u2029d"}, {"n": 2}]
    append_jsonl(path, rows)
    assert read_jsonl(path) == rows
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n"))  # an editor's BOM, CRLF
    assert read_jsonl(path) == rows


@pytest.mark.parametrize("name", ["/etc/passwd", "../outside.txt", "a/../../b", "..\\win.txt", ""])
def test_a_task_file_path_leaving_the_workspace_is_named_at_load(tmp_path, name):
    path = tmp_path / "tasks.jsonl"
    rows = [
        {"id": "bad", "task": "t", "files": {name: "x"}},
        {"id": "ok", "task": "t", "files": {"a/b.txt": "y"}},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    bad, ok = get_domain("jsonl", data=path).tasks()
    assert bad.metadata["invalid"] == (
        f"{path}:1: 'files' path {name!r} leaves the workspace; use a relative path inside it"
    )
    assert "invalid" not in ok.metadata


KILLED_JUDGE = """
import os, pathlib, signal
if "{when}" in ("always", pathlib.Path("submission.txt").read_text()):
    os.kill(os.getpid(), signal.SIGKILL)  # what an OOM kill does to it
print('{{"score": 0}}')
"""


@pytest.mark.bwrap
def test_an_evaluator_killed_by_a_signal_gives_no_verdict(tasks_file, bwrap):
    """Killed (or not started: 126, 127), the command judged nothing: its 0 is an error the rollout
    checks on a plain wrong answer, not the submission's score."""
    (tasks_file.parent / "judge.py").write_text(KILLED_JUDGE.format(when="always"))
    domain = get_domain("jsonl", data=tasks_file, evaluator="python3 /evaluator/judge.py")
    evaluation = domain.evaluate(domain.tasks()[0], "yes", bwrap)
    assert evaluation.score == 0.0 and "was killed by signal 9 (exit 137)" in evaluation.details["error"]
    missing = get_domain("jsonl", data=tasks_file, evaluator="python3 /evaluator/absent.py; exit 127")
    assert (
        "could not be started (exit 127: not found)"
        in missing.evaluate(domain.tasks()[0], "yes", bwrap).details["error"]
    )


@pytest.mark.bwrap
def test_a_judge_killed_only_by_the_submission_scores_it_zero_and_a_broken_one_is_no_score(
    tasks_file, bwrap, openai_server, tmp_path
):
    from recreate.evaluation.rollout import ERROR_KEY, REASON_KEY, Rollouts
    from recreate.testing import tool_call
    from tests.evaluation.conftest import MINIMAL

    outcomes = {}
    for when in ("crash", "always"):
        (tasks_file.parent / "judge.py").write_text(KILLED_JUDGE.format(when=when))
        domain = get_domain("jsonl", data=tasks_file, evaluator="python3 /evaluator/judge.py")
        openai_server.enqueue(tool_call("submit", {"answer": "crash"}))
        runner = Rollouts(MINIMAL, domain, model=f"scripted@{openai_server.url}", sandbox=bwrap, cache=False)
        outcomes[when] = runner.run(domain.tasks()[0], seed=0)
    own = outcomes["crash"]  # the control (a plain wrong answer) is judged: the crash was the submission's
    assert own.evaluation.score == 0.0 and ERROR_KEY not in own.metadata
    broken = outcomes["always"]  # it dies on the control too: the evaluator's failure, no score
    assert broken.evaluation is None and broken.metadata[ERROR_KEY] == "evaluator"
    assert "plain wrong answer too" in broken.metadata[REASON_KEY]


@pytest.mark.parametrize("task_id", ["", "   ", "a\nb", "tab\there"])
def test_a_task_id_that_is_no_name_is_named_at_load(tmp_path, task_id):
    path = tmp_path / "tasks.jsonl"
    rows = [{"id": task_id, "task": "t", "expected": "1"}, {"id": "fine", "task": "t", "expected": "1"}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tasks = get_domain("jsonl", data=path).tasks("all")
    bad, good = sorted(tasks, key=lambda task: task.id != task_id)
    assert f"{path}:1: 'id' {task_id!r} is no name" in bad.metadata["invalid"]
    assert "invalid" not in good.metadata


@pytest.mark.bwrap
def test_a_verdict_cannot_restate_the_evaluators_exit_code(tasks_file, bwrap):
    (tasks_file.parent / "judge.py").write_text(
        'import json, sys\nprint(json.dumps({"score": 0, "exit_code": 0, "stderr_tail": ""}))\n'
        'sys.stderr.write("boom")\nsys.exit(3)\n'
    )
    domain = get_domain("jsonl", data=tasks_file, evaluator="python3 /evaluator/judge.py")
    details = domain.evaluate(domain.tasks()[0], "no", bwrap).details
    assert details["exit_code"] == 3 and "boom" in details["stderr_tail"]
