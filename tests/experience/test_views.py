"""Inspection views: content of each view and the token budget on a 300-step trajectory."""

from __future__ import annotations

import pytest

from recreate.experience.inspection import ExperienceInspector
from recreate.experience.store import ExperienceStore
from recreate.experience.views import CHARS_PER_TOKEN, approx_tokens, parse_view, render
from tests.experience.factory import bash_step, long_trajectory, make_trajectory

VIEWS = [
    "index",
    "summary",
    "steps(0,299)",
    "steps(10,20)",
    "window(150,5)",
    "failures",
    "submission",
    "evaluation",
]


@pytest.mark.parametrize("budget", [300, 1500])
@pytest.mark.parametrize("view", VIEWS)
def test_views_of_a_300_step_trajectory_stay_within_budget(view: str, budget: int) -> None:
    traj = long_trajectory("t-long", n_steps=300)
    assert len(traj.steps) == 300 and len(traj.to_json()) > 500_000
    text = render(traj, view, budget)
    assert approx_tokens(text) <= budget
    assert len(text) <= budget * CHARS_PER_TOKEN
    assert "t-long" in text


def test_index_view_lists_files_commands_errors_and_tests() -> None:
    steps = [
        bash_step(0, "cat src/solve.py", stdout="def solve(): ..."),
        bash_step(1, "python src/solve.py", stderr="Traceback\nKeyError: 'price'", exit_code=1),
        bash_step(
            2, "python -m pytest tests/test_solve.py -q", stdout="2 passed, 1 failed in 0.1s", exit_code=1
        ),
        bash_step(3, "python -m pytest tests/test_solve.py -q", stdout="3 passed in 0.1s"),
    ]
    text = render(make_trajectory("t-idx", steps=steps), "index", 1500)
    assert "src/solve.py" in text and "tests/test_solve.py" in text
    assert "step 1: KeyError" in text
    assert "step 2: pytest: 2 passed, 1 failed" in text and "step 3: pytest: 3 passed" in text
    assert "  0: cat src/solve.py" in text


def test_index_view_of_long_run_keeps_errors_with_step_numbers() -> None:
    text = render(long_trajectory("t-long"), "index", 1500)
    assert "step 7: ZeroDivisionError" in text
    assert "more (view=" in text  # what was left out, and where to find it


def test_steps_window_and_failures_views_select_the_right_steps() -> None:
    traj = long_trajectory("t-long")
    assert "— step 12:" in render(traj, "steps(10,20)", 3000) and "— step 21:" not in render(
        traj, "steps(10,20)"
    )
    window = render(traj, "window(150, 2)", 3000)
    assert all(f"— step {i}:" in window for i in range(148, 153)) and "— step 153:" not in window
    failures = render(traj, "failures", 3000)
    assert "— step 17 [ZeroDivisionError]" in failures and "— step 0 " not in failures


def test_unknown_views_are_refused() -> None:
    for bad in ("everything", "steps", "window(3)", "index(1,2)"):
        with pytest.raises(ValueError, match="unknown view"):
            parse_view(bad)


def test_compare_finds_where_passed_and_failed_runs_diverge(store: ExperienceStore) -> None:
    common = [bash_step(0, "cat data.csv", stdout="a,b"), bash_step(1, "python prep.py", stdout="ok")]
    good = common + [bash_step(2, "python solve.py --fillna 0", stdout="42")]
    bad = common + [
        bash_step(2, "python solve.py", stderr="ValueError: NaN in column b", exit_code=1),
        bash_step(3, "python solve.py --force", stderr="ValueError: NaN in column b", exit_code=1),
    ]
    store.ingest([make_trajectory("t-good", steps=good), make_trajectory("t-bad", steps=bad, passed=False)])
    text = ExperienceInspector(store).compare(["t-good", "t-bad"], budget_tokens=800)
    assert "identical first 2 step(s)" in text
    assert "passed step 2: python solve.py --fillna 0" in text
    assert "failed step 2: python solve.py [ValueError]" in text
    assert "wrong output" in text  # the failed run's feedback
    assert approx_tokens(text) <= 800
    other_task = ExperienceInspector(store).compare(["t-good", "t-good"])
    assert "no passed/failed pair" in other_task


def test_repeated_output_lines_are_counted_not_repeated() -> None:
    from recreate.experience.digest import collapse_repeats

    assert collapse_repeats("start\nok\nok\nok\nok\nend") == "start\nok  [×4]\nend"
    assert collapse_repeats("a\na\nb") == "a\na\nb"
    text = render(long_trajectory("t-long"), "steps(16,16)", 2000)
    assert "line  [×400]" in text


def test_the_task_statement_is_the_real_task_not_a_worked_example() -> None:
    from recreate.experience.digest import task_statement

    traj = make_trajectory("t-ex", task_text="Sum the first ten primes.")
    traj.messages[1:1] = [
        {"role": "user", "content": "What is 3 + 4?", "name": "example"},
        {"role": "assistant", "content": "```bash\necho 7\n```", "name": "example"},
    ]
    assert task_statement(traj) == "Sum the first ten primes."
