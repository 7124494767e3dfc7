"""`ds1000`: data-science coding problems judged by the problem's own test context.

The solution runs in a fresh sandbox of its own with the pinned DS-1000 environment bound read-only
(or, with `image=`, a container image that has it), `python -I` so no file in a working folder can
shadow a library module, and single-threaded BLAS/OpenMP. Only data comes back from it; the checks,
which hold the expected answers, run in a checker sandbox no solution ever runs in (judge.py).
"""

from __future__ import annotations

import re
import textwrap
import threading
import zlib
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from recreate.config import load_settings
from recreate.domains.base import Evaluation, Task
from recreate.domains.common import (
    DomainDataError,
    TaskFileDomain,
    jsonl_files,
    read_jsonl,
    submission_problem,
    tail,
    tasks_phrase,
    unreadable_hint,
    zero,
)
from recreate.domains.ds1000.datasets import (
    dataset_files,
    downloads_problem,
    files_digest,
    needed_downloads,
    spec_parts,
)
from recreate.domains.ds1000.env import (
    GROUPS,
    MPL_CACHE,
    default_env_path,
    env_python,
    groups_for,
    installed_extras,
    is_ready,
    missing_modules,
    setup_hint,
)
from recreate.domains.ds1000.judge import CheckerServer, imported_modules, needed_modules
from recreate.domains.splits import SplitPlan
from recreate.sandbox.base import Result, Sandbox, SandboxSpec
from recreate.sandbox.shell import DEFAULT_PATH

REQUIRED_FIELDS = ("prompt", "reference_code", "metadata", "code_context")
WORKDIR = "/workspace"
SOLUTION_MAX_FILE_MB = 64  # also the most a solution's results may weigh
# the checker's stages before the solution's results are read: a failure there is never the solution's
SETUP_STAGES = ("loading the test context", "generating the test cases")
CHECKER_CPU_SECONDS = 10**7  # the checker server lives as long as the domain; each job has its own alarm
_THREADS = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
_FENCE = re.compile(r"```[a-zA-Z0-9_+-]*\n(.*?)```", re.DOTALL)
# answers with nothing in them (and their imports): the selftest probes one per task, a different kind
# from task to task: numpy's comparisons broadcast a size-0 array against anything and a `zip` over an
# empty result checks nothing, so the checker fails a result with no elements where the expected answer
# has some (None, which has no size, is left to the problems' own checks, which fail it)
EMPTY_ANSWERS = (
    ("numpy as np", "np.array([])"),
    ("numpy as np", "np.empty((0, 3))"),
    ("", "[]"),
    ("", "()"),
    ("", "{}"),
    ("", "set()"),
    ("", "''"),
    ("pandas as pd", "pd.DataFrame()"),
    ("pandas as pd", "pd.Series(dtype=float)"),
    ("scipy.sparse", "scipy.sparse.csr_matrix((0, 0))"),
    ("", "None"),
)
# a Pytorch or Tensorflow problem's empty answers are tensors: `(result == ans).all()` holds for one of size 0
LIBRARY_EMPTY_ANSWERS = {
    "Pytorch": (("torch", "torch.tensor([])"), ("torch", "torch.empty(0, 3)"), ("", "[]")),
    "Tensorflow": (
        ("tensorflow as tf", "tf.constant([])"),
        ("tensorflow as tf", "tf.zeros((0, 3))"),
        ("", "[]"),
    ),
}
_MARKER_LINES = {
    "<code>",
    "</code>",
    "BEGIN SOLUTION",
    "END SOLUTION",
    "### BEGIN SOLUTION",
    "### END SOLUTION",
}


def inserts_into_function_body(code_context: str) -> bool:
    """True when `[insert]` is the body of a `def` (the solution must be indented)."""
    lines = code_context.splitlines()
    for index, line in enumerate(lines):
        if line.strip() == "[insert]":
            previous = [x for x in lines[:index] if x.strip()]
            return bool(previous) and previous[-1].rstrip().endswith(":")
    return False


def normalize_solution(solution: str, code_context: str) -> str:
    """Take the code out of a fenced block or <code> markers; indent a function body if it was not."""
    fenced = _FENCE.findall(solution)
    if fenced:
        solution = fenced[0]
    solution = "\n".join(x for x in solution.splitlines() if x.strip() not in _MARKER_LINES)
    if inserts_into_function_body(code_context) and solution.strip():
        code_lines = [x for x in solution.splitlines() if x.strip()]
        if any(not x.startswith((" ", "\t")) for x in code_lines):
            solution = textwrap.indent(textwrap.dedent(solution), "    ")
    return solution


def empty_answer(kind: int, function_body: bool, answers: tuple[tuple[str, str], ...] = EMPTY_ANSWERS) -> str:
    """The solution that answers `answers[kind]`, as a function body or as `result = ...`."""
    module, value = answers[kind]
    imports = f"import {module}\n" if module else ""
    if function_body:
        return textwrap.indent(f"{imports}return {value}", "    ")
    return f"{imports}result = {value}"


class DS1000Domain(TaskFileDomain):
    name = "ds1000"

    def __init__(
        self,
        data: str | Path,
        *,
        seed: int = 0,
        train: float = 0.5,
        val: float = 0.25,
        env: str | Path | None = None,
        image: str | None = None,
        timeout: float = 120.0,
        memory_mb: int = 4096,
        datasets: str | Path | None = None,
    ) -> None:
        self.image = image
        if image and env is None:
            self.env = None  # the image provides the libraries
        else:
            self.env = Path(env or default_env_path(load_settings().home)).absolute()
        self.timeout = timeout
        self.memory_mb = memory_mb
        self._contexts: dict[str, str] = {}  # hidden test code, kept out of Task so no agent sees it
        self._checkers: dict[int, CheckerServer] = {}
        self._checkers_lock = threading.Lock()
        self._probe_lock = threading.Lock()  # guards the two tables below, each filled once
        self._modules: dict[str, set[str]] | None = None  # task id -> the modules its test needs
        self._lacking: dict[str, set[str]] | None = None  # task id -> those the environment lacks
        plan = SplitPlan(seed=seed, train=train, val=val)
        super().__init__(data, lambda path: _load_file(path, self._contexts), plan)
        home = load_settings().home
        self.datasets = Path(datasets or home / "datasets").expanduser().absolute()  # datasets.py
        self._downloads = {key: needed_downloads(code) for key, code in self._contexts.items()}
        names = set().union(*(names for names, _ in self._downloads.values()))
        answers = {path.resolve() for path in jsonl_files(data)}
        self._dataset_files = dataset_files(self.datasets, names, answers, home.resolve())
        self.datasets_digest = files_digest(self._dataset_files)

    def environment_problem(self) -> str | None:
        """What the preflight refuses a run for: the pinned environment is not built or lacks a library
        some task's test imports (optional groups), or some test downloads data (no network here)."""
        return self._environment_problem(self._contexts)

    def _environment_problem(self, task_ids: Collection[str]) -> str | None:
        needs = {key: self._downloads[key] for key in task_ids if key in self._downloads}
        return self._library_problem(task_ids) or downloads_problem(self.datasets, needs, self._dataset_files)

    def _library_problem(self, task_ids: Collection[str]) -> str | None:
        if self.env is None:
            return None
        needs = self._needed()
        if not is_ready(self.env):
            groups = groups_for(set().union(*(needs.get(key, set()) for key in task_ids)))
            command = "recreate domain setup ds1000" + (f" --with {','.join(groups)}" if groups else "")
            return (
                f"the DS-1000 environment is missing at {self.env}; build it with `{command}` (or "
                "scripts/ds1000_env.sh), or pass env=PATH"
            )
        with self._probe_lock:
            if self._lacking is None:  # probed once: the environment does not change under a run
                missing = set(missing_modules(self.env, set().union(*needs.values())))
                self._lacking = {key: found & missing for key, found in needs.items() if found & missing}
        lacking = {key: self._lacking[key] for key in sorted(task_ids) if key in self._lacking}
        if not lacking:
            return None
        modules = sorted(set().union(*lacking.values()))
        who = tasks_phrase(list(lacking), "imports", "import")
        return (
            f"{who} {', '.join(modules)}, which the DS-1000 environment at {self.env} lacks; "
            f"{setup_hint(self.env, modules)}"
        )

    def needed_groups(self) -> list[str]:
        """The environment's optional library groups these tasks need (`recreate domain setup --data`)."""
        return groups_for(set().union(*self._needed().values()))

    def _needed(self) -> dict[str, set[str]]:
        """Task id -> the top-level modules its test needs (read from the tests once)."""
        with self._probe_lock:
            if self._modules is None:
                library = {task.id: task.metadata.get("library") for task in self.tasks("all")}
                contexts = self._contexts.items()
                self._modules = {key: needed_modules(code, library.get(key)) for key, code in contexts}
            return self._modules

    def evaluate(self, task: Task, submission: str | None, sandbox: Sandbox) -> Evaluation:
        problem = submission_problem(task, submission)
        if problem:
            return problem
        missing = self._environment_problem([task.id])
        if missing:
            return zero(missing)
        code_context = self._contexts.get(task.id)
        if code_context is None:
            return zero(f"task {task.id} is not a task of this DS-1000 dataset")
        solution = normalize_solution(submission, code_context)
        details = {"library": task.metadata["library"], "problem_id": task.metadata["problem_id"]}
        judged = self._checker(sandbox).judge(
            {"code_context": code_context, "solution": solution},
            sandbox,
            self._spec(max_file_mb=SOLUTION_MAX_FILE_MB),
            self._home_files(),
            f"{self._python()} -I run.py",
            self.timeout,
        )
        if judged.error:
            if self.env is not None:
                judged.error += unreadable_hint(
                    self.env,
                    "build the environment elsewhere, e.g. RECREATE_DS1000_ENV=/opt/recreate/ds1000 "
                    "recreate domain setup ds1000",
                )
            return zero(judged.error, **details)
        if judged.verdict is None:
            return zero(_no_verdict_reason(judged.solution_run, self.timeout), **details)
        if judged.verdict.get("stage") in SETUP_STAGES:  # no solution involved: the test's own failure
            reason = _failure_feedback(judged.verdict)
            return zero(f"the task's test fails before any solution is judged: {reason}", **details)
        details |= {k: v for k, v in judged.verdict.items() if k != "passed"}
        if judged.verdict.get("passed") is True:
            return Evaluation(score=1.0, passed=True, feedback="all test cases passed", details=details)
        return Evaluation(
            score=0.0, passed=False, feedback=_failure_feedback(judged.verdict), details=details
        )

    def _checker(self, sandbox: Sandbox) -> CheckerServer:
        """The checker server for this sandbox backend (one per backend, started on first use)."""
        with self._checkers_lock:
            checker = self._checkers.get(id(sandbox))
            if checker is None:
                config = {"modules": imported_modules(self._contexts.values()), "timeout": self.timeout}
                spec = replace(self._spec(), cpu_seconds=CHECKER_CPU_SECONDS)
                checker = CheckerServer(sandbox, spec, f"{self._python()} -I check.py", config)
                self._checkers[id(sandbox)] = checker
            return checker

    def close(self) -> None:
        """Stop the checker sandboxes (they also end with this process)."""
        with self._checkers_lock:
            for checker in self._checkers.values():
                checker.close()
            self._checkers.clear()

    def _python(self) -> str:
        return str(env_python(self.env)) if self.env is not None else "python3"

    def _spec(self, max_file_mb: int = 512) -> SandboxSpec:
        home = f"{WORKDIR}/home"
        env = {**_THREADS, "HOME": home, "MPLCONFIGDIR": f"{home}/mpl", "MPLBACKEND": "Agg"}
        # bound at its own path: the font cache and the venv's pyvenv.cfg name absolute paths
        binds = ((str(self.env), str(self.env)),) if self.env is not None else ()
        data_binds, data_env = spec_parts(self._dataset_files)
        return SandboxSpec(
            image=self.image,
            workdir=WORKDIR,
            env=env | data_env,
            ro_binds=binds + data_binds,
            memory_mb=self.memory_mb,
            cpu_seconds=int(self.timeout) + 30,
            max_file_mb=max_file_mb,
        )

    def agent_spec(self) -> SandboxSpec:
        """The agent's sandbox: the pinned libraries read-only and first on PATH, so the agent runs its
        solution the way it is judged."""
        if self.env is None or not self.env.is_dir():
            return SandboxSpec()
        variables = {"PATH": f"{self.env}/bin:{DEFAULT_PATH}", "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
        data_binds, data_env = spec_parts(self._dataset_files)
        binds = ((str(self.env), str(self.env)), *data_binds)
        return SandboxSpec(ro_binds=binds, env=variables | data_env, memory_mb=4096)

    def _home_files(self) -> dict[str, bytes]:
        caches = sorted((self.env / MPL_CACHE).glob("fontlist-*.json")) if self.env is not None else []
        return {f"home/mpl/{cache.name}": cache.read_bytes() for cache in caches}

    def wrong_submissions(self, task: Task) -> list[str]:
        """Solutions that must never pass: an empty answer (of a kind that changes from task to task),
        which does nothing toward the task just as an empty solution does and also probes numpy's
        size-0 broadcast; for a function body, also one that does nothing (an empty body would fail to
        compile, which says little about the tests)."""
        body = inserts_into_function_body(self._contexts.get(task.id, ""))
        answers = LIBRARY_EMPTY_ANSWERS.get(task.metadata.get("library"), EMPTY_ANSWERS)
        empty = empty_answer(zlib.crc32(task.id.encode()) % len(answers), body, answers)
        return ["    pass", empty] if body else [empty]

    def describe(self) -> str:
        groups = [GROUPS[name] for name in (installed_extras(self.env) if self.env is not None else [])]
        names = ["NumPy", "Pandas", "SciPy", "scikit-learn", "Matplotlib", *(group.label for group in groups)]
        libraries = ", ".join(names[:-1]) + " and " + names[-1]
        pins = "numpy 1.26, pandas 1.5.3, scipy 1.12, scikit-learn 1.4, matplotlib 3.8"
        pins = ", ".join([pins, *(group.version for group in groups)])
        return (
            f"DS-1000: data-science coding problems for {libraries} (pinned: {pins}). Each task "
            "shows setup code that ends where the solution goes; the solution must usually assign the "
            "answer to the variable named in the prompt (e.g. `result = ...`), or is the body of the "
            "function `f` the prompt opens (then it must `return` the result; unindented bodies are "
            "indented automatically). A submission is that Python code only: no setup code, no prints, "
            "no plt.show(); code in ``` fences or <code> tags is unwrapped. Judging: the problem's hidden "
            "tests run the solution on several inputs in a fresh sandbox without network; score 1 only "
            "if every test passes. Some problems also forbid or require specific calls (checked on the "
            "code's tokens). Feedback names the failing check, the exception, and for the first test "
            "case the expected and the produced result."
        )


def _no_verdict_reason(run: Result | None, timeout: float) -> str:
    if run is None:
        return "the checker gave no verdict (it was stopped or timed out)"
    if run.timed_out:
        return f"the solution did not finish within {timeout:.0f} s (timeout)"
    return (
        f"the solution's process died without sending its results (exit {run.exit_code}); stderr tail:\n"
        f"{tail(run.stderr)}"
    )


def _failure_feedback(report: dict) -> str:
    lines = [
        f"failed in {report.get('stage')}: {report.get('exception')}: {report.get('message') or ''}".rstrip()
    ]
    if report.get("exception") == "KeyError" and report.get("message") == "'result'":
        lines.append("the solution never assigned the variable `result`")
    if "URLError" in str(report.get("exception")) or "name resolution" in str(report.get("message")):
        lines.append("the code tried to reach the network; evaluation sandboxes have none")
    if report.get("stage") == "test_string":
        lines.append("the code does not use the construct the problem requires (or uses a forbidden one)")
    if report.get("failing_line"):
        lines.append(f"failing check: {report['failing_line']}")
    if "expected" in report:
        lines.append(f"expected (test case 1): {report['expected']}")
        lines.append(f"got: {report['got']}")
    if report.get("exception") != "AssertionError" and report.get("traceback"):
        lines.append("traceback tail:\n" + tail(report["traceback"], lines=8))
    return "\n".join(lines)


def _load_file(path: Path, contexts: dict[str, str]) -> list[Task]:
    tasks = []
    for number, row in read_jsonl(path):
        metadata = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
        problem_id = metadata.get("problem_id", f"line{number}")
        missing = [f for f in REQUIRED_FIELDS if not row.get(f)]
        meta = {
            "problem_id": problem_id,
            "library": metadata.get("library", "unknown"),
            "category": metadata.get("library", "unknown"),
            "perturbation_type": metadata.get("perturbation_type"),
            "file": str(path),
            "line": number,
        }
        if missing:
            meta["invalid"] = f"{path}:{number} lacks {', '.join(missing)}"
        elif "[insert]" not in row["code_context"]:
            meta["invalid"] = f"{path}:{number}: code_context has no [insert] placeholder"
        origin = metadata.get("perturbation_origin_id", problem_id)
        contexts[f"ds1000-{problem_id}"] = row.get("code_context") or ""
        tasks.append(
            Task(
                id=f"ds1000-{problem_id}",
                prompt=row.get("prompt") or "",
                group=f"ds1000-origin-{origin}",
                reference=row.get("reference_code"),
                metadata=meta,
            )
        )
    if not tasks:
        raise DomainDataError(f"{path}: no tasks in the file")
    return tasks
