"""Adversarial answers: realistic ways models write a correct answer must pass, hedges and wrong values
must not, and no text (however large or deeply nested) may crash or stall the judge."""

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recreate.domains import get_domain
from recreate.domains.math.answers import boxed_answers, extract_answer, literal_form


class BrokenSandbox:
    """Literal formats are judged on the host: a sandbox that cannot start proves it is never needed."""

    name = "broken"

    def open(self, spec=None):
        raise OSError("no sandbox")

    def available(self):
        return False, "broken on purpose"


def _task(tmp_path: Path, answer: str, answer_format: str | None = None):
    row = {"id": "a", "problem": "?", "answer": answer}
    if answer_format:
        row["answer_format"] = answer_format
    path = tmp_path / "set.jsonl"
    path.write_text(json.dumps(row) + "\n")
    domain = get_domain("math", data=path)
    return domain, domain.tasks()[0]


@pytest.mark.parametrize(
    "submission",
    [
        "\\boxed{45^\\circ}",
        "\\boxed{45^{\\circ}}",
        "$45°$.",
        "\\boxed{45\\degree}",
        "\\boxed{45 \\text{ degrees}}",
        "\\boxed{45\\%}",
        "\\boxed{\\$45}",
        "\\boxed{45 \\text{ miles}}",
        "\\boxed{45\\text{ cm}^2}",
        "\\boxed{\\, 45\\,}",
        "\\boxed{{45}}",
        "\\boxed{\\displaystyle 45}",
        "\\boxed{\\textbf{(C) }45}",
        "\\boxed{\\textbf{(C)}\\ 45}",
        "\\boxed{x = 45}",
        "The answer is 45.",
        "The final answer is $45$.",
        "**Final Answer:** 45",
        "Answer: 45",
        "answer:\n45",
        "**45**",
    ],
)
def test_decorated_integer_answers_pass(tmp_path, submission):
    domain, task = _task(tmp_path, "45")
    evaluation = domain.evaluate(task, submission, BrokenSandbox())
    assert evaluation.passed, (submission, evaluation.feedback)


@pytest.mark.parametrize(
    "submission",
    ["\\boxed{3\\,159}", "\\boxed{3\\!159}", "\\boxed{3\\ 159}", "\\boxed{3~159}", "\\boxed{3\\!,\\!159}"],
)
def test_latex_spacing_as_a_thousands_separator_passes(tmp_path, submission):
    domain, task = _task(tmp_path, "3159")
    assert domain.evaluate(task, submission, BrokenSandbox()).passed, submission


def test_the_unicode_minus_is_a_minus(tmp_path):
    domain, task = _task(tmp_path, "-1")
    assert domain.evaluate(task, "\\boxed{\u22121}", BrokenSandbox()).passed
    assert not _task(tmp_path, "1")[0].evaluate(_task(tmp_path, "1")[1], "\u22121", BrokenSandbox()).passed


@pytest.mark.parametrize(
    "submission",
    [
        "\\boxed{45 \\text{ or } 46}",
        "\\boxed{45 \\text{ or more}}",
        "\\boxed{45 \\text{ million}}",
        "\\boxed{45 \\text{ squared}}",
        "\\boxed{45 \\text{ halves}}",
        "\\boxed{45 \\text{ thousandths}}",
        "45 quarters",
        "\\boxed{45 \\text{ score}}",
        "\\boxed{45 pi}",
        "\\boxed{45\\pi}",
        "\\boxed{45, 46}",
        "\\boxed{4\\,5}",
        "\\boxed{C}",
        "\\boxed{(C)}",
        "\\boxed{x = 44 + 1}",
        "\\boxed{45^2}",
        "\\boxed{45!}",
        "The answer is 44 + 1.",
        "The answer is 45 or 46.",
        "The answer is $44$, not $45$.",
        "45 + 0 degrees",
        "\\boxed{45e0}",
    ],
)
def test_hedged_and_computed_answers_fail(tmp_path, submission):
    domain, task = _task(tmp_path, "45")
    assert not domain.evaluate(task, submission, BrokenSandbox()).passed, submission


@pytest.mark.parametrize(
    ("answer", "literal"),
    [("45^\\circ", "45"), ("\\$1,234", "1,234"), ("45 or 46", "45 or 46"), ("2 pi", "2 pi"), ("x", "x")],
)
def test_literal_form(answer, literal):
    assert literal_form(answer) == literal


def test_a_number_answer_with_a_unit_passes_and_keeps_its_value(tmp_path):
    domain, task = _task(tmp_path, "0.5", "number")
    for ok in ("\\boxed{0.5 \\text{ cm}}", "\\boxed{\\$0.50}", "The answer is 0.5."):
        assert domain.evaluate(task, ok, BrokenSandbox()).passed, ok
    for bad in ("\\boxed{50\\%}", "\\boxed{0.5 \\text{ thousand}}", "\\boxed{5 \\text{ cm}}"):
        assert not domain.evaluate(task, bad, BrokenSandbox()).passed, bad


@pytest.mark.parametrize(
    "submission",
    [
        "\\boxed{" + "9" * 5000 + "}",
        "4" * 200_000,
        "0." + "4" * 5000,
        "-" + "1" * 4301,
    ],
)
def test_literals_beyond_pythons_int_digit_limit_score_zero_without_raising(tmp_path, submission):
    domain, task = _task(tmp_path, "45")
    evaluation = domain.evaluate(task, submission, BrokenSandbox())
    assert evaluation.score == 0.0


def test_a_literal_of_thousands_of_digits_can_be_the_answer(tmp_path):
    digits = "7" * 5000
    domain, task = _task(tmp_path, digits)
    assert domain.evaluate(task, f"\\boxed{{{digits}}}", BrokenSandbox()).passed


@pytest.mark.parametrize(
    "submission",
    [
        "\\text{" * 30_000 + "45" + "}" * 30_000,
        "\\textbf{" * 20_000 + "45" + "}" * 20_000,
        "Answer: " + " " * 200_000 + "x",
        "Answer" + " " * 400 + "x\ny",
        "**Answer" + " \t" * 200 + ":" + " " * 200 + "**x\ny",
        "Answer: 45" + " \\," * 60_000 + "x",
        " " * 200_000 + ",",
        "\\boxed{" * 30_000,
        "{" * 250_000,
    ],
)
def test_pathological_submissions_are_judged_quickly(tmp_path, submission):
    domain, task = _task(tmp_path, "45")
    started = time.monotonic()
    evaluation = domain.evaluate(task, submission, BrokenSandbox())
    assert time.monotonic() - started < 5
    assert evaluation.score in (0.0, 1.0)


def test_dollars_around_several_segments_stay(tmp_path):
    """Stripping the outer `$` of `$1$, $2$` turned `, ` into the math and left both values as text."""
    assert extract_answer("$1$, $2$") == "$1$, $2$"
    assert extract_answer("$42$.") == "42" and extract_answer("$42.$") == "42"
    assert extract_answer("The answer is $\\frac{1}{3}$, not $\\frac{1}{2}$.").startswith("The answer")


@pytest.mark.bwrap
@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("2", "2.0"),
        ("2", "\\boxed{2.00}"),
        ("2", "\\boxed{x = 2}"),
        ("\\frac{7}{2}", "3.5"),
        ("0.5", "\\frac12"),
    ],
)
def test_an_exact_value_passes_a_rational_expression_answer(tmp_path, bwrap, gold, answer):
    domain, task = _task(tmp_path, gold, "expression")
    evaluation = domain.evaluate(task, answer, bwrap)
    assert evaluation.passed, evaluation.feedback


@pytest.mark.bwrap
@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("\\frac{1}{2}", "\\boxed{0.5000001}"),
        ("\\frac{7}{2}", "3.5000004"),
        ("0.5", "0.4999999"),
        ("\\frac{1}{3}", "0.333333"),
        ("2", "$1$, $2$"),
        ("2", "$1$ or $2$"),
        ("\\frac{1}{2}", "The answer is $\\frac{1}{3}$, not $\\frac{1}{2}$."),
    ],
)
def test_near_values_and_hedges_fail_a_rational_expression_answer(tmp_path, bwrap, gold, answer):
    domain, task = _task(tmp_path, gold, "expression")
    assert not domain.evaluate(task, answer, bwrap).passed


@pytest.mark.parametrize(
    "submission",
    [
        "\\boxed{44} or \\boxed{45}",
        "\\boxed{46}, \\boxed{45}",
        "$\\boxed{44}$ ... \\fbox{45}",
        "\\framebox{44} or \\boxed{45}",
        "\\boxed{44 \\text{ or } \\boxed{45}}",
        "\\boxed{\\boxed{44} 45}",
        "\\boxed{x = 44} or \\boxed{x = 45}",
        "\\boxed{45} unless it is \\boxed{\\frac{91}{2}}",
        "\\boxed{44 \\{} or \\boxed{45}",  # an escaped brace is no brace: the first box closes
        "\\boxed{45} \\boxed{C}",
    ],
)
def test_boxes_holding_different_answers_are_a_hedge_and_fail(tmp_path, submission):
    """Judged by its last box, `\\boxed{44} or \\boxed{45}` passed whichever of the two was right."""
    domain, task = _task(tmp_path, "45")
    evaluation = domain.evaluate(task, submission, BrokenSandbox())
    assert not evaluation.passed and "every boxed answer must be right" in evaluation.feedback, (
        evaluation.feedback
    )


def test_more_boxes_than_are_judged_one_by_one_are_a_hedge(tmp_path):
    domain, task = _task(tmp_path, "45", "expression")
    submission = " or ".join(f"\\boxed{{{n}}}" for n in range(40, 46))
    evaluation = domain.evaluate(task, submission, BrokenSandbox())  # refused before any sandbox
    assert not evaluation.passed and "6 different answers (40, 41, 42)" in evaluation.feedback
    assert "a hedge scores 0, box one final answer" in evaluation.feedback


@pytest.mark.bwrap
@pytest.mark.parametrize(
    ("gold", "submission"),
    [
        ("45", "\\boxed{44} or \\boxed{45}"),
        ("\\frac{1}{2}", "\\boxed{\\frac{1}{3}} or \\boxed{\\frac{1}{2}}"),
        ("\\sqrt{2}", "\\boxed{-\\sqrt{2}}, \\boxed{\\sqrt{2}}"),
    ],
)
def test_an_expression_hedge_over_boxes_fails(tmp_path, bwrap, gold, submission):
    domain, task = _task(tmp_path, gold, "expression")
    evaluation = domain.evaluate(task, submission, bwrap)
    assert not evaluation.passed and "every boxed answer must be right: wrong answer" in evaluation.feedback


@pytest.mark.bwrap
@pytest.mark.parametrize(
    ("gold", "submission"),
    [
        ("\\frac{1}{2}", "\\boxed{\\frac{1}{2}} = \\boxed{0.5}"),
        ("\\frac{1}{2}", "\\boxed{\\dfrac{1}{2}}. So \\boxed{\\frac{1}{2}}"),
        ("2\\sqrt{3}", "\\boxed{2\\sqrt{3}} \\boxed{2\\sqrt3}"),
        ("(1, 2)", "\\boxed{(1,2)} \\boxed{\\left(1,2\\right)}"),
    ],
)
def test_one_answer_boxed_in_two_ways_passes(tmp_path, bwrap, gold, submission):
    domain, task = _task(tmp_path, gold, "expression")
    evaluation = domain.evaluate(task, submission, bwrap)
    assert evaluation.passed, evaluation.feedback


@pytest.mark.parametrize(
    "submission",
    [
        "First \\boxed{45}; so the answer is \\boxed{45}.",
        "\\boxed{45} (check: \\boxed{45.0})",
        "\\boxed{\\boxed{45}}",
        "\\boxed{\\textbf{(C) } 45} and again \\boxed{45}",
    ],
)
def test_boxes_repeating_one_answer_pass(tmp_path, submission):
    domain, task = _task(tmp_path, "45")
    evaluation = domain.evaluate(task, submission, BrokenSandbox())
    assert evaluation.passed, evaluation.feedback


@pytest.fixture(scope="module")
def integer_task(tmp_path_factory):
    return _task(tmp_path_factory.mktemp("hedge"), "0")


@settings(max_examples=60, deadline=None)
@given(st.integers(-999, 999), st.integers(-999, 999), st.sampled_from([" or ", ", ", "\n", " then "]))
def test_no_two_box_hedge_over_different_integers_passes(integer_task, first, second, between):
    domain, task = integer_task
    submission = f"\\boxed{{{first}}}{between}\\boxed{{{second}}}"
    for gold in (first, second):
        evaluation = domain.evaluate(replace(task, reference=str(gold)), submission, BrokenSandbox())
        assert evaluation.passed == (first == second), submission


def test_many_boxes_are_read_in_one_pass(tmp_path):
    started = time.monotonic()
    assert boxed_answers("\\boxed{" * 100_000) == []
    assert boxed_answers("\\boxed{7}" * 20_000 + "\\boxed{8}") == ["7", "8"]
    assert time.monotonic() - started < 2
    domain, task = _task(tmp_path, "45")
    for nested in (
        "\\boxed{" * 25_000 + "45" + "}" * 25_000,
        "\\fbox{\\text{" * 15_000 + "45" + "}" * 30_000,
    ):
        started = time.monotonic()  # each box's content copied once (nested boxes made it quadratic)
        assert domain.evaluate(task, nested, BrokenSandbox()).score in (0.0, 1.0)
        assert time.monotonic() - started < 2


def test_a_hedge_is_named_briefly(tmp_path):
    domain, task = _task(tmp_path, "45")
    started = time.monotonic()
    feedback = domain.evaluate(task, "\\boxed{" + "4" * 100_000 + "} \\boxed{45}", BrokenSandbox()).feedback
    assert "the submission boxes 2 different answers (" in feedback and len(feedback) < 600
    assert time.monotonic() - started < 2
