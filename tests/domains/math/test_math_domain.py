import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recreate.domains import get_domain
from recreate.domains.common import DomainDataError
from recreate.domains.math.answers import as_integer, as_number, extract_answer, last_boxed
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
    ("text", "value"),
    [("073", 73), ("-1", -1), ("3,159", 3159), ("3{,}159", 3159), ("+8", 8), ("27.00", 27), (" 9 ", 9)],
)
def test_integer_literals(text, value):
    assert as_integer(text) == value


@pytest.mark.parametrize(
    "text",
    ["73.5", "7.3e1", "27.01", "1,00", "x", "", "\\frac{146}{2}", "88 + 94", "2*91", "--182", "١٨٢", "0x10"],
)
def test_not_integer_literals(text):
    assert as_integer(text) is None


@pytest.mark.parametrize(("text", "value"), [("0.5", 0.5), ("-.25", -0.25), ("1,234.5", 1234.5)])
def test_number_literals(text, value):
    assert as_number(text) == value


@pytest.mark.parametrize("text", ["1/2", "\\frac{1}{2}", "5e-1", "0.5+0", "1.2.3", ".", "+"])
def test_not_number_literals(text):
    assert as_number(text) is None


def _domain(tmp_path: Path, rows: list[dict], **options) -> object:
    return get_domain("math", data=_write(tmp_path / "set.jsonl", rows), **options)


def test_an_expression_equal_to_the_answer_is_not_an_answer(tmp_path):
    """The arithmetic example's reward hack: `88 + 94` for "What is 88 + 94?" scored 1."""
    domain = _domain(tmp_path, [{"id": "a", "problem": "What is 88 + 94?", "answer": "182"}])
    task = domain.tasks()[0]
    for expression in ("88 + 94", "\\boxed{88+94}", "\\frac{364}{2}", "182 + 0", "2 \\cdot 91", "1.82e2"):
        evaluation = domain.evaluate(task, expression, BrokenSandbox())  # judged on the host
        assert evaluation.score == 0.0 and "not a number literal" in evaluation.feedback, expression
    for literal in ("182", " 182\n", "\\boxed{182}", "$182$.", "+182", "182.0", "\\textbf{182}"):
        assert domain.evaluate(task, literal, BrokenSandbox()).passed, literal


@settings(max_examples=200, deadline=None)
@given(n=st.integers(-(10**6), 10**6), offset=st.integers(1, 999), factor=st.integers(2, 9))
def test_for_any_integer_only_its_literal_passes(tmp_path_factory, n, offset, factor):
    folder = tmp_path_factory.mktemp("prop")
    domain = _domain(folder, [{"id": "a", "problem": "?", "answer": str(n)}])
    task = domain.tasks()[0]
    expressions = [
        f"{n - offset} + {offset}",
        f"{n + offset} - {offset}",
        f"{n * factor} / {factor}",
        f"\\frac{{{n * factor}}}{{{factor}}}",
        f"\\boxed{{{n - offset}+{offset}}}",
        f"({n})*1",
        f"{n}^1",
    ]
    for expression in expressions:
        assert not domain.evaluate(task, expression, BrokenSandbox()).passed, expression
    for literal in (str(n), f"\\boxed{{{n}}}", f"{n:,}", f" {n} ", f"{n}."):
        assert domain.evaluate(task, literal, BrokenSandbox()).passed, literal
    assert not domain.evaluate(task, str(n + offset), BrokenSandbox()).passed


def test_number_format_compares_decimal_literals_exactly(tmp_path):
    rows = [{"id": "a", "problem": "?", "answer": "0.5", "answer_format": "number"}]
    domain = _domain(tmp_path, rows)
    task = domain.tasks()[0]
    for ok in ("0.5", "0.50", "\\boxed{.5}", "+0.5"):
        assert domain.evaluate(task, ok, BrokenSandbox()).passed, ok
    for bad in ("1/2", "\\frac{1}{2}", "0.25+0.25", "0.5000001"):
        assert not domain.evaluate(task, bad, BrokenSandbox()).passed, bad


def test_answer_format_per_task_wins_over_the_datasets(tmp_path):
    rows = [
        {"id": "a", "problem": "?", "answer": "2"},
        {"id": "b", "problem": "?", "answer": "2", "answer_format": "integer"},
    ]
    domain = _domain(tmp_path, rows, answer_format="expression")
    formats = [t.metadata["answer_format"] for t in domain.tasks()]
    assert formats == ["expression", "integer"]
    inferred = _domain(tmp_path, [*rows, {"id": "c", "problem": "?", "answer": "\\frac{1}{2}"}])
    assert [t.metadata["answer_format"] for t in inferred.tasks()] == ["integer", "integer", "expression"]


def test_a_declared_format_the_reference_does_not_fit_makes_the_task_invalid(tmp_path):
    rows = [
        {"id": "a", "problem": "?", "answer": "\\frac{1}{2}", "answer_format": "integer"},
        {"id": "b", "problem": "?", "answer": "2", "answer_format": "roman"},
        {"id": "c", "problem": "?", "answer": "2"},
    ]
    domain = _domain(tmp_path, rows)
    first, second, _ = domain.tasks()
    assert "is not an integer literal" in first.metadata["invalid"]
    assert "answer_format must be one of integer, number, expression" in second.metadata["invalid"]
    assert "cannot be judged" in domain.evaluate(first, "0.5", BrokenSandbox()).feedback
    with pytest.raises(DomainDataError, match="answer_format must be one of"):
        _domain(tmp_path, rows, answer_format="decimal")


def test_selftest_probes_expressions_equal_to_integer_answers(tmp_path):
    domain = _domain(tmp_path, [{"id": "a", "problem": "?", "answer": "42"}])
    report = run_selftest(domain, BrokenSandbox(), domain.tasks())
    check = report.checks[0]
    assert "35 + 7" in check.wrong and "\\boxed{\\frac{84}{2}}" in check.wrong
    assert report.false_passes == [] and report.reference_failures == []


def test_the_arithmetic_examples_references_pass_and_their_sums_do_not():
    data = Path(__file__).parents[3] / "examples" / "arithmetic" / "tasks.jsonl"
    domain = get_domain("math", data=data)
    for task in domain.tasks():
        assert task.metadata["answer_format"] == "integer"
        assert domain.evaluate(task, task.reference, BrokenSandbox()).passed
        question = task.prompt.removeprefix("What is ").removesuffix("?")
        assert not domain.evaluate(task, question, BrokenSandbox()).passed, question


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
def test_an_integer_declared_as_expression_needs_an_exact_rational(tmp_path, bwrap):
    domain = _domain(tmp_path, [{"id": "a", "problem": "?", "answer": "2", "answer_format": "expression"}])
    task = domain.tasks()[0]
    assert domain.evaluate(task, "\\frac{4}{2}", bwrap).passed
    assert not domain.evaluate(task, "2.0000001", bwrap).passed
    assert not domain.evaluate(task, "\\frac{5}{2}", bwrap).passed


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
