"""`math`: competition problems (AIME/AMC-style JSONL) judged by their final answer.

Each task's answer format (`answer_format` on the task's row, else the domain's `answer_format` option,
else `integer` when the reference answer is an integer literal and `expression` otherwise) decides how:
- `integer` (AIME, AMC, the arithmetic example): the answer must be an integer literal, compared
  exactly on the host as text; an expression equal to it (`88 + 94`, `\\frac{364}{2}`) is not an answer;
- `number`: a decimal literal, compared exactly as a rational number on the host;
- `expression`: free-form math, compared for equivalence by math-verify inside a fresh sandbox (its
  parser can evaluate expression text written by the model).
How the final answer is read from a submission (its boxes, a stated answer, decorations): answers.py.
"""

from __future__ import annotations

import importlib.metadata
import json
from functools import partial
from pathlib import Path

from recreate.domains.base import Evaluation, Task
from recreate.domains.common import (
    DomainDataError,
    TaskFileDomain,
    first_field,
    read_jsonl,
    run_check,
    shareable_copy,
    submission_problem,
    zero,
)
from recreate.domains.math.answers import (
    as_integer,
    as_number,
    boxed_answers,
    extract_answer,
    literal_form,
)
from recreate.domains.splits import SplitPlan
from recreate.sandbox.base import Sandbox, SandboxSpec
from recreate.text import clip_middle

PROBLEM_FIELDS = ("problem", "question", "prompt", "task")
ANSWER_FIELDS = ("answer", "expected_answer", "final_answer")
ANSWER_FORMATS = ("integer", "number", "expression")
# a decimal literal: sign, digits (thousands grouped by commas, or not), optional fraction; ASCII only
# math-verify and its pure-Python dependencies, bound read-only into the sandbox from this environment
CHECKER_DISTRIBUTIONS = ("math-verify", "latex2sympy2_extended", "sympy", "mpmath", "antlr4-python3-runtime")
LIBRARY_MOUNT = "/recreate-mathlib"
MAX_BOXES = 4  # a submission boxing more different answers is a hedge, not judged box by box
CHECKER = Path(__file__).parent / "checks" / "math_check.py"  # runs inside the sandbox


def checker_library_binds() -> tuple[tuple[str, str], ...]:
    """(host, sandbox) binds of each distribution's packages and its .dist-info (versions are looked up)."""
    binds = []
    for name in CHECKER_DISTRIBUTIONS:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError as exc:
            raise DomainDataError(f"the math domain needs {name}: pip install math-verify") from exc
        metadata = next(f for f in dist.files or () if f.name == "METADATA")
        top_level = (dist.read_text("top_level.txt") or "").split()
        for path in [Path(metadata.locate()).parent, *(Path(dist.locate_file(t)) for t in top_level)]:
            if path.is_dir():
                binds.append((str(shareable_copy(path)), f"{LIBRARY_MOUNT}/{path.name}"))
    return tuple(binds)


def resolve_format(declared: object, reference: str | None) -> str:
    """The declared format, else `integer` for an integer reference and `expression` for any other."""
    if declared is not None:
        return str(declared)
    return "integer" if reference is not None and as_integer(reference) is not None else "expression"


def task_format(task: Task) -> str:
    """The answer format the task was loaded with (inferred for a task built by hand)."""
    return task.metadata.get("answer_format") or resolve_format(None, task.reference)


class MathDomain(TaskFileDomain):
    name = "math"

    def __init__(
        self,
        data: str | Path,
        *,
        seed: int = 0,
        train: float = 0.5,
        val: float = 0.25,
        python: str | None = None,
        image: str | None = None,
        timeout: float = 60.0,
        answer_format: str | None = None,
    ) -> None:
        if answer_format is not None and answer_format not in ANSWER_FORMATS:
            raise DomainDataError(
                f"answer_format must be one of {', '.join(ANSWER_FORMATS)}; got {answer_format!r}"
            )
        load = partial(_load_file, answer_format=answer_format)
        super().__init__(data, load, SplitPlan(seed=seed, train=train, val=val))
        # the sandbox's own Python; without an image, math-verify comes from this environment (binds)
        self.python = python or "python3"
        self.image = image
        self.library_binds = () if image else checker_library_binds()
        self.timeout = timeout

    def evaluate(self, task: Task, submission: str | None, sandbox: Sandbox) -> Evaluation:
        problem = submission_problem(task, submission)
        if problem:
            return problem
        boxes = boxed_answers(submission)
        if len(boxes) <= 1:
            return self._judge(task, extract_answer(submission), sandbox)
        named = f"{len(boxes)} different answers ({', '.join(clip_middle(box, 40) for box in boxes[:3])})"
        if len(boxes) > MAX_BOXES:
            why = f"the submission boxes {named}: a hedge scores 0, box one final answer"
            return zero(why, expected=str(task.reference))
        for box in boxes:  # each answer the submission gives must be right: a hedge scores 0
            verdict = self._judge(task, box, sandbox)
            if not verdict.passed:
                feedback = (
                    f"the submission boxes {named}, and every boxed answer must be right: {verdict.feedback}"
                )
                return Evaluation(score=0.0, passed=False, feedback=feedback, details=verdict.details)
        return verdict

    def _judge(self, task: Task, answer: str, sandbox: Sandbox) -> Evaluation:
        if not answer:
            return zero(
                f"the submission has no answer (expected {task.reference}); submit the final answer only"
            )
        gold = str(task.reference)
        kind = task_format(task)
        details = {"expected": gold, "extracted": answer, "answer_format": kind}
        if kind == "expression":
            return self._verify_in_sandbox(gold, as_integer(gold), answer, sandbox, details)
        got = as_number(literal_form(answer))  # an integer's literal may be `182.0`, never `91 * 2`
        if got is None:
            return zero(
                f"not an answer: {answer!r} is not a number literal; this task's answer is {kind}, so "
                "submit the final value itself (e.g. `42`), not an expression or text",
                **details,
            )
        return _verdict(as_number(gold) == got, gold, answer, details | {"method": f"exact {kind}"})

    def _verify_in_sandbox(
        self, gold: str, gold_int: int | None, answer: str, sandbox: Sandbox, details: dict
    ) -> Evaluation:
        spec = SandboxSpec(
            image=self.image, memory_mb=2048, env={"OMP_NUM_THREADS": "1"}, ro_binds=self.library_binds
        )
        payload = json.dumps({"gold": gold, "gold_int": gold_int, "answer": answer})
        run = run_check(
            sandbox,
            spec,
            CHECKER,
            {"input.json": payload},
            f"{self.python} -I check.py {LIBRARY_MOUNT}",
            self.timeout,
        )
        details = details | {"method": "math-verify"}
        if run.error:
            return zero(run.error, **details)
        if run.report is None:
            result = run.result
            why = (
                "timed out"
                if result.timed_out
                else f"exited {result.exit_code}: {result.stderr.strip()[-400:]}"
            )
            return zero(f"the answer checker failed ({why}); extracted answer {answer!r}", **details)
        details["parsed_answer"] = run.report.get("parsed_answer")
        return _verdict(bool(run.report.get("equivalent")), gold, answer, details)

    def wrong_submissions(self, task: Task) -> list[str]:
        """Answers that must never pass: off-by-one values, a non-integer near the answer, nothing, and
        for literal formats expressions that equal the answer (an expression is not an answer)."""
        kind = task_format(task)
        gold = as_integer(str(task.reference))
        if gold is None:
            return ["", "\\boxed{0.123456789}"]
        wrong = [str(gold + 1), f"\\boxed{{{gold - 1}}}", f"\\frac{{{2 * gold + 1}}}{{2}}", ""]
        wrong.append(f"\\boxed{{{gold - 1}}} or \\boxed{{{gold}}}")  # a hedge over two boxes
        if kind in ("integer", "number"):
            wrong += [f"{gold - 7} + 7", f"\\boxed{{\\frac{{{2 * gold}}}{{2}}}}", f"{gold}*1"]
        return wrong

    def describe(self) -> str:
        return (
            "Math competition problems (AIME/AMC style). Each task is one problem with a single final "
            "answer (AIME: an integer 0-999). A submission is the final answer: either the bare answer "
            "(e.g. `73`) or text whose \\boxed{...} holds it (with several boxes, every boxed answer must "
            "be right: a hedge scores 0). Judging: an integer answer must be "
            "the integer itself, written as a number (leading zeros, a sign, thousands commas and `.0` "
            "are fine; an expression such as `88 + 94` or `\\frac{364}{2}` scores 0 even when it equals "
            "the answer); other answers are compared for mathematical equivalence with math-verify "
            "(fractions, radicals, LaTeX). Score 1 if correct, else 0. The feedback says which answer "
            "was extracted and what was expected."
        )


def _format_problem(kind: str, answer: str) -> str | None:
    """Why a reference answer does not fit its declared format, else None."""
    if kind not in ANSWER_FORMATS:
        return f"answer_format must be one of {', '.join(ANSWER_FORMATS)}; got {kind!r}"
    if kind == "integer" and as_integer(answer) is None:
        return f"answer {answer!r} is not an integer literal (answer_format integer)"
    if kind == "number" and as_number(answer) is None:
        return f"answer {answer!r} is not a number literal (answer_format number)"
    return None


def _verdict(equivalent: bool, gold: str, answer: str, details: dict) -> Evaluation:
    if equivalent:
        return Evaluation(score=1.0, passed=True, feedback=f"correct: {answer}", details=details)
    return Evaluation(
        score=0.0,
        passed=False,
        feedback=f"wrong answer: got {clip_middle(answer, 200)!r}, expected {gold!r}",
        details=details,
    )


def _load_file(path: Path, answer_format: str | None = None) -> list[Task]:
    """Tasks of one JSONL file; a row's own `answer_format` wins over the domain's option."""
    tasks = []
    for number, row in read_jsonl(path):
        raw_id = first_field(row, ("id", "problem_id", "unique_id"))
        task_id = str(raw_id) if raw_id is not None else f"line{number}"
        if not task_id.startswith(path.stem):
            task_id = f"{path.stem}-{task_id}"
        problem = first_field(row, PROBLEM_FIELDS)
        answer = first_field(row, ANSWER_FIELDS)
        missing = [what for what, value in (("problem", problem), ("answer", answer)) if value in (None, "")]
        reference = None if answer is None else str(answer)
        kind = resolve_format(row.get("answer_format", answer_format), reference)
        metadata = {
            "source": str(row.get("source") or path.stem),
            "category": str(row.get("source") or path.stem),
            "file": str(path),
            "line": number,
            "answer_format": kind,
        }
        if missing:
            metadata["invalid"] = (
                f"{path}:{number} has no {' or '.join(missing)} field "
                f"(looked for {PROBLEM_FIELDS if 'problem' in missing else ANSWER_FIELDS})"
            )
        elif misfit := _format_problem(kind, str(answer)):
            metadata["invalid"] = f"{path}:{number}: {misfit}"
        tasks.append(
            Task(
                id=task_id,
                prompt=str(problem or ""),
                reference=reference,
                metadata=metadata,
            )
        )
    if not tasks:
        raise DomainDataError(f"{path}: no tasks in the file")
    return tasks
