import json
from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.domains.math_domain import as_integer, extract_answer, last_boxed
from recreate.domains.selftest import run_selftest


class BrokenSandbox:
    """A sandbox whose sessions cannot start: evaluation must still return a score, never raise."""

    name = "broken"

    def open(self, spec=None):
        raise OSError("bwrap: No such file or directory")

    def available(self):
        return False, "broken on purpose"


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def small(tmp_path):
    rows = [
        {"id": "a", "problem": "1+1?", "answer": "2"},
        {"id": 5, "question": "Half of one?", "expected_answer": "\\frac{1}{2}"},
        {"id": "c", "problem": "No answer given"},
        {"id": "d", "answer": 4},
    ]
    return get_domain("math", data=_write(tmp_path / "set.jsonl", rows))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so the answer is \\boxed{73}.", "73"),
        ("\\boxed{1} then \\boxed{\\frac{3}{4}}", "\\frac{3}{4}"),
        ("$\\boxed{\\sqrt{2}}$", "\\sqrt{2}"),
        ("  $42$. ", "42"),
        ("\\fbox{7}", "7"),
        ("$z=\\boxed{\\textbf{(211) }}$", "211"),
        ("\\boxed{\\mathbf{127}}", "127"),
        ("\\boxed{(1, 2)}", "(1, 2)"),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_unbalanced_box_is_not_an_answer():
    assert last_boxed("\\boxed{12") is None


@pytest.mark.parametrize(
    ("text", "value"), [("073", 73), ("-1", -1), ("3,159", 3159), ("+8", 8), ("27.00", 27)]
)
def test_integer_literals(text, value):
    assert as_integer(text) == value


@pytest.mark.parametrize("text", ["73.5", "7.3e1", "27.01", "1,00", "x", "", "\\frac{146}{2}"])
def test_not_integer_literals(text):
    assert as_integer(text) is None


def test_loading_handles_varied_field_names_and_prefixes_ids(small):
    ids = [t.id for t in small.tasks()]
    assert ids == ["set-a", "set-5", "set-c", "set-d"]
    assert small.tasks()[1].prompt == "Half of one?"
    assert small.tasks()[1].reference == "\\frac{1}{2}"


def test_integers_compare_exactly_on_the_host(small):
    task = small.tasks()[0]
    sandbox = BrokenSandbox()  # the integer path never needs a sandbox
    assert small.evaluate(task, "2", sandbox).passed
    assert small.evaluate(task, "The answer is \\boxed{002}.", sandbox).passed
    wrong = small.evaluate(task, "3", sandbox)
    assert not wrong.passed and wrong.score == 0.0
    assert "got '3', expected '2'" in wrong.feedback


def test_missing_fields_score_zero_with_the_reason(small):
    no_answer, no_problem = small.tasks()[2], small.tasks()[3]
    for task, field in ((no_answer, "answer"), (no_problem, "problem")):
        evaluation = small.evaluate(task, "4", BrokenSandbox())
        assert evaluation.score == 0.0 and not evaluation.passed
        assert f"has no {field}" in evaluation.feedback


def test_missing_empty_and_huge_submissions_score_zero(small):
    task = small.tasks()[0]
    assert "no submission" in small.evaluate(task, None, BrokenSandbox()).feedback
    assert "no answer" in small.evaluate(task, "  $ $ ", BrokenSandbox()).feedback
    huge = small.evaluate(task, "2" * 1_000_000, BrokenSandbox())
    assert huge.score == 0.0 and "limit" in huge.feedback


def test_a_broken_sandbox_scores_zero_instead_of_raising(small):
    evaluation = small.evaluate(small.tasks()[1], "0.5", BrokenSandbox())
    assert evaluation.score == 0.0 and "sandbox failed" in evaluation.feedback


@pytest.mark.bwrap
@pytest.mark.parametrize("answer", ["\\frac{1}{2}", "0.5", "1/2", "\\boxed{\\dfrac{2}{4}}"])
def test_math_verify_accepts_equivalent_forms(small, bwrap, answer):
    evaluation = small.evaluate(small.tasks()[1], answer, bwrap)
    assert evaluation.passed, evaluation.feedback
    assert evaluation.details["method"] == "math-verify"


@pytest.mark.bwrap
@pytest.mark.parametrize("answer", ["\\frac{1}{3}", "0.49", "x"])
def test_math_verify_rejects_different_values(small, bwrap, answer):
    assert not small.evaluate(small.tasks()[1], answer, bwrap).passed


@pytest.mark.bwrap
def test_integer_gold_needs_an_exact_integer(small, bwrap):
    task = small.tasks()[0]
    assert small.evaluate(task, "\\frac{4}{2}", bwrap).passed
    assert not small.evaluate(task, "2.0000001", bwrap).passed
    assert not small.evaluate(task, "\\frac{5}{2}", bwrap).passed


@pytest.mark.bwrap
def test_model_text_is_parsed_only_inside_the_sandbox(small, bwrap, tmp_path):
    marker = tmp_path / "pwned"
    attack = f"__import__('pathlib').Path('{marker}').write_text('x')"
    evaluation = small.evaluate(small.tasks()[1], attack, bwrap)
    assert not evaluation.passed
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.shared_data
@pytest.mark.parametrize("name", ["aime24.jsonl", "amc23.jsonl"])
def test_selftest_on_real_competitions_has_no_false_passes(shared_data, bwrap, name):
    domain = get_domain("math", data=shared_data / "math" / name)
    report = run_selftest(domain, bwrap, domain.tasks(), concurrency=2)
    assert report.false_passes == []
    assert report.reference_failures == []
    assert len(report.checks) == {"aime24.jsonl": 30, "amc23.jsonl": 40}[name]


@pytest.mark.shared_data
def test_worked_solutions_are_judged_by_their_last_box(shared_data):
    path = shared_data / "math" / "aime24.jsonl"
    domain = get_domain("math", data=path)
    solutions = {
        f"aime24-{r['id'].split('-')[-1]}": r["reference_solution"] for r in map(json.loads, path.open())
    }
    boxed = [t for t in domain.tasks() if "\\boxed" in solutions[t.id]]
    assert len(boxed) >= 25
    for task in boxed:  # all integer answers: judged on the host, no sandbox needed
        evaluation = domain.evaluate(task, solutions[task.id], BrokenSandbox())
        assert evaluation.passed, (task.id, evaluation.feedback)


@pytest.mark.bwrap
def test_a_crashing_checker_scores_zero_with_the_reason(tmp_path, bwrap):
    data = _write(tmp_path / "set.jsonl", [{"id": "a", "problem": "Half of one?", "answer": "\\frac{1}{2}"}])
    domain = get_domain("math", data=data, python="/bin/false")
    evaluation = domain.evaluate(domain.tasks()[0], "0.5", bwrap)
    assert evaluation.score == 0.0 and "the answer checker failed (exited 1" in evaluation.feedback
