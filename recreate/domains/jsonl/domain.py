"""`jsonl`: a custom domain from a tasks file and an evaluator.

Tasks file, one JSON object a line: `id`, `task` (the prompt), optional `files` ({path: text} put into
the agent's workspace), optional `expected` (or `answer`/`reference`: text, or any JSON value, then
taken as its JSON text: `true`, `[1, 2]`), optional `category`; any other fields reach the evaluator as
`metadata["fields"]` (e.g. hidden tests).

Evaluator (`evaluator=`):
- a shell command, run in a FRESH sandbox whose working folder holds `submission.txt` and `task.json`;
  the evaluator's folder (default: the tasks file's folder) is bound read-only at /evaluator, always
  without the tasks files (a copy without them is bound when they lie inside it). Exit code 0 passes
  (score 1) and anything else fails (score 0), unless stdout's last JSON line
  `{"score": 0..1, "feedback": "...", "passed": bool}` says otherwise.
- `module:function` or `path/to/file.py:function`: the user's own trusted Python, called in this process
  as `function(task, submission)`; it gets the submission as data and returns an Evaluation, a dict
  like the JSON line above, a number (score) or a bool.
- none: the submission must equal the task's expected answer (whitespace trimmed).

The contract for an evaluator that runs submitted code (a verdict a submission can forge is a reward an
optimized agent learns to forge): the evaluator never runs the submission in its own process. It reads
`task.json` and deletes it, makes itself undumpable (`prctl(PR_SET_DUMPABLE, 0)`: no other process of
its user can read its memory or open its stdout), runs the submission in a child process that gets only
the inputs and returns only data (JSON), compares that data with the expected answer in the parent,
and prints the verdict. `examples/custom_domain/evaluate.py` is that pattern; `recreate domain selftest`
probes it with submissions that print a passing line and exit 0, and that read every file they can see.
A callable evaluator must treat the submission as data and never execute it.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import re
import shlex
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recreate.config import load_settings
from recreate.domains.base import Evaluation, Task
from recreate.domains.common import (
    DomainDataError,
    TaskFileDomain,
    jsonl_files,
    submission_problem,
    tail,
    unreadable_hint,
    zero,
)
from recreate.domains.jsonl.evaluator_folder import evaluator_folder, folder_hashes
from recreate.domains.jsonl.tasks_file import load_tasks_file
from recreate.domains.splits import SplitPlan
from recreate.sandbox import fresh_session
from recreate.sandbox.base import Sandbox, SandboxSpec

EVALUATOR_MOUNT = "/evaluator"
_CALLABLE = re.compile(r"(?:py:)?(?P<module>[\w.]+|[^\s:]+\.py):(?P<function>[A-Za-z_]\w*)")


def is_callable_spec(evaluator: str) -> bool:
    return _CALLABLE.fullmatch(evaluator.strip()) is not None


def load_callable(spec: str, base: Path) -> Callable[[Task, str], Any]:
    """Import `module:function` or `file.py:function` (a relative file is looked up beside the tasks file)."""
    match = _CALLABLE.fullmatch(spec.strip())
    if match is None:
        raise DomainDataError(f"evaluator {spec!r} is not of the form module:function or file.py:function")
    module_name, function = match["module"], match["function"]
    if module_name.endswith(".py"):
        path = Path(module_name) if Path(module_name).is_absolute() else base / module_name
        if not path.is_file():
            path = Path(module_name).absolute()
        if not path.is_file():
            raise DomainDataError(
                f"evaluator file {module_name} not found beside {base} or in the current folder"
            )
        loader_spec = importlib.util.spec_from_file_location(f"recreate_evaluator_{path.stem}", path)
        module = importlib.util.module_from_spec(loader_spec)
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:  # the user's file: its error, named, in one line
            raise DomainDataError(
                f"evaluator {spec!r}: importing {path} raised {type(exc).__name__}: {exc}; fix the file"
            ) from exc
    else:
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise DomainDataError(
                f"evaluator module {module_name!r} cannot be imported: {type(exc).__name__}: {exc}"
            ) from exc
    fn = getattr(module, function, None)
    if not callable(fn):
        raise DomainDataError(f"evaluator {spec!r}: {module_name} has no function {function!r}")
    return fn


def as_evaluation(value: Any) -> Evaluation:
    """Turn what an evaluator returned into an Evaluation (score clamped to [0, 1])."""
    if isinstance(value, Evaluation):
        return value
    if isinstance(value, bool):
        return Evaluation(score=float(value), passed=value, feedback="passed" if value else "failed")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            return zero(f"the evaluator returned {value}, not a score; return a number in 0..1")
        score = min(max(float(value), 0.0), 1.0)
        return Evaluation(score=score, passed=score >= 1.0, feedback=f"score {score:g}")
    if isinstance(value, dict) and isinstance(value.get("score"), int | float | bool):
        problem = _verdict_problem(value)
        if problem:
            return zero(problem)
        score = min(max(float(value["score"]), 0.0), 1.0)
        passed = bool(value["passed"]) if "passed" in value else score >= 1.0
        extra = {k: v for k, v in value.items() if k not in ("score", "passed", "feedback")}
        return Evaluation(score=score, passed=passed, feedback=str(value.get("feedback", "")), details=extra)
    return zero(f"the evaluator returned {type(value).__name__}, not a score; return a dict with 'score'")


def _verdict_problem(value: dict[str, Any]) -> str | None:
    """Why a reported verdict cannot be read as one (NaN would poison every mean; the string "false"
    is truthy), else None."""
    if not math.isfinite(value["score"]):
        return f"the evaluator reported score {value['score']}, not a number in 0..1; report a finite score"
    if "passed" in value and not isinstance(value["passed"], bool | int | float):
        return f"the evaluator reported passed={value['passed']!r}, not true or false; report a JSON boolean"
    return None


class JsonlDomain(TaskFileDomain):
    name = "jsonl"

    def __init__(
        self,
        data: str | Path,
        *,
        evaluator: str | Callable[[Task, str], Any] | None = None,
        evaluator_dir: str | Path | None = None,
        description: str | None = None,
        seed: int = 0,
        train: float = 0.5,
        val: float = 0.25,
        image: str | None = None,
        timeout: float = 60.0,
    ) -> None:
        super().__init__(data, load_tasks_file, SplitPlan(seed=seed, train=train, val=val))
        self.base = jsonl_files(data)[0].parent.absolute()
        self.evaluator_dir = Path(evaluator_dir or self.base).absolute()
        self._tasks_files = jsonl_files(data)
        self.image = image
        self.timeout = timeout
        self.description = description
        self.command: str | None = None
        self.function: Callable[[Task, str], Any] | None = None
        if callable(evaluator):
            self.function = evaluator
        elif isinstance(evaluator, str) and is_callable_spec(evaluator):
            self.function = load_callable(evaluator, self.base)
        elif isinstance(evaluator, str) and evaluator.strip():
            self.command = evaluator.strip()

    def environment_problem(self) -> str | None:
        """A command that runs a file under /evaluator the evaluator folder lacks (it would exit with
        an error on every submission, read as a score of 0 each time); the run's preflight refuses it."""
        for name in self._named_files():
            if not (self.evaluator_dir / name).exists():
                return (
                    f"the evaluator command runs {EVALUATOR_MOUNT}/{name}, but the evaluator folder "
                    f"{self.evaluator_dir} (what {EVALUATOR_MOUNT} shows) has no {name}; put it there or "
                    "pass the folder that has it as evaluator_dir (-o evaluator_dir=FOLDER)"
                )
        return None

    def evaluator_hashes(self) -> dict[str, str]:
        """The files a command evaluator can read at /evaluator, hashed: a fixed script, or a helper
        module it imports, is another evaluator though the command reads the same (the rollout cache's
        key holds these). Nothing for a Python evaluator (its identity is in the key already)."""
        if not self.command:
            return {}
        return folder_hashes(self.evaluator_dir, self._tasks_files, (load_settings().home,))

    def _named_files(self) -> list[str]:
        """The files under /evaluator the command names (`python3 /evaluator/check.py`: check.py)."""
        try:
            words = shlex.split(self.command or "")
        except ValueError:  # the shell will say what is wrong with it
            return []
        prefix = f"{EVALUATOR_MOUNT}/"
        return [word.removeprefix(prefix) for word in words if word.startswith(prefix) and word != prefix]

    def evaluator_problem(self, sandbox: Sandbox) -> str | None:
        """The command tried once on a plain wrong answer: a shell that cannot start it (exit 126: not
        executable, 127: not found) would score every submission 0, each read as the submission's failure."""
        if not self.command or not self._tasks:
            return None
        tried = self._run_command(self._tasks[0], "0", sandbox).details
        code = tried.get("exit_code")
        if code is None and tried.get("error"):  # it did not run: the sandbox or the folder failed
            return f"the evaluator cannot run in the {sandbox.name} sandbox: {tried['error']}"
        if code not in (126, 127):
            return None
        said = "is not executable" if code == 126 else "is not found"
        return (
            f"the evaluator command `{self.command}` {said} in the {sandbox.name} sandbox (exit {code}); "
            "fix the command (--evaluator), or run it where it exists (an image with --option image=...)"
        )

    def evaluate(self, task: Task, submission: str | None, sandbox: Sandbox) -> Evaluation:
        problem = submission_problem(task, submission)
        if problem:
            return problem
        if self.command:
            return self._run_command(task, submission, sandbox)
        if self.function:
            return self._call_function(task, submission)
        if task.reference is None:
            return zero(
                f"task {task.id} has no expected answer and the domain has no evaluator; pass evaluator="
            )
        if submission.strip() == task.reference.strip():
            return Evaluation(score=1.0, passed=True, feedback="matches the expected answer")
        return Evaluation(
            score=0.0,
            passed=False,
            feedback=f"got {submission.strip()[:300]!r}, expected {task.reference.strip()[:300]!r}",
        )

    def _run_command(self, task: Task, submission: str, sandbox: Sandbox) -> Evaluation:
        try:
            mount = evaluator_folder(self.evaluator_dir, self._tasks_files, (load_settings().home,))
        except (DomainDataError, OSError) as exc:
            return zero(f"the evaluator folder cannot be prepared: {exc}")
        spec = SandboxSpec(
            image=self.image,
            ro_binds=((str(mount), EVALUATOR_MOUNT),),
            env={"RECREATE_EVALUATOR_DIR": EVALUATOR_MOUNT},  # one spec for every task: spares serve it
            cpu_seconds=int(self.timeout) + 30,
        )
        record = {"id": task.id, "task": task.prompt, "expected": task.reference, "metadata": task.metadata}
        try:
            with fresh_session(sandbox, spec) as session:
                session.put("submission.txt", submission)
                session.put("task.json", json.dumps(record))
                result = session.run(self.command, timeout=self.timeout, env={"RECREATE_TASK_ID": task.id})
        except Exception as exc:  # evaluate() never raises: a broken sandbox scores 0 with the reason
            hint = unreadable_hint(self.evaluator_dir, "move the evaluator folder somewhere others can read")
            return zero(f"the evaluation sandbox failed: {exc}{hint}")
        details = {"exit_code": result.exit_code, "stderr_tail": tail(result.stderr, lines=5)}
        if result.timed_out:
            return zero(
                f"the evaluator command did not finish within {self.timeout:g} s (timeout)", **details
            )
        reported = _last_json_line(result.stdout)
        if reported is not None:
            evaluation = as_evaluation(reported)
            evaluation.details = {**evaluation.details, **details}  # the run's exit code, not the verdict's
            return evaluation
        output = tail(result.stdout + "\n" + result.stderr, lines=10)
        broken = _unfinished(result.exit_code)
        if broken:  # no verdict: the rollout tries a plain wrong answer to tell whose failure it is
            error = f"the evaluator command {broken}"
            feedback = error + (f":\n{output}" if output else "")
            return Evaluation(score=0.0, passed=False, feedback=feedback, details={"error": error, **details})
        if result.exit_code == 0:
            return Evaluation(
                score=1.0, passed=True, feedback=output or "evaluator exited 0", details=details
            )
        return Evaluation(
            score=0.0,
            passed=False,
            details=details,
            feedback=f"evaluator exited {result.exit_code}" + (f":\n{output}" if output else ""),
        )

    def _call_function(self, task: Task, submission: str) -> Evaluation:
        outcome: dict[str, Any] = {}

        def call() -> None:
            try:
                outcome["value"] = self.function(task, submission)
            except Exception as exc:
                outcome["error"] = exc

        # a daemon thread: an evaluator stuck forever is abandoned, and never blocks the process from exiting
        worker = threading.Thread(target=call, name=f"evaluator-{task.id}", daemon=True)
        worker.start()
        worker.join(self.timeout)
        if worker.is_alive():
            return zero(f"the evaluator function did not return within {self.timeout:g} s (timeout)")
        if "error" in outcome:
            exc = outcome["error"]
            return zero(f"the evaluator function raised {type(exc).__name__}: {exc}")
        return as_evaluation(outcome.get("value"))

    def wrong_submissions(self, task: Task) -> list[str]:
        return ["", "\u2205 not an answer \u2205"]

    def describe(self) -> str:
        if self.description:
            return self.description
        how = (
            f"the command `{self.command}` judges each submission in a fresh sandbox"
            if self.command
            else "a Python evaluator judges each submission"
            if self.function
            else "the submission must equal the expected answer exactly (whitespace trimmed)"
        )
        return (
            f"Custom tasks from {self.base}. Each task is a text prompt, sometimes with files in the "
            f"workspace. A submission is the final answer or artifact as text; {how}. Score 0..1; the "
            f"feedback is the evaluator's explanation."
        )


def _unfinished(exit_code: int | None) -> str | None:
    """How a command that gave no verdict ended without judging, else None: the shell could not start it
    (126, 127) or a signal killed it (128 + N; the engine's OOM kill is 137)."""
    if exit_code in (126, 127):
        said = "not executable" if exit_code == 126 else "not found"
        return f"could not be started (exit {exit_code}: {said})"
    if exit_code is not None and (exit_code < 0 or 128 < exit_code <= 128 + 64):
        signal = -exit_code if exit_code < 0 else exit_code - 128
        return f"was killed by signal {signal} (exit {exit_code})"
    return None


def _last_json_line(stdout: str) -> dict[str, Any] | None:
    """The last line of `stdout` that is a JSON object with a score. Lines end at newlines only: a verdict
    echoing the submission may hold U+2028 or U+0085 unescaped (json.dumps with ensure_ascii=False), and
    splitting there would drop the verdict and leave the exit code (0: a pass) to judge."""
    for line in reversed(stdout.strip().split("\n")):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict) and "score" in value:
                return value
    return None
