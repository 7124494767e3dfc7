"""Self-test of a domain's evaluation: reference solutions must pass, wrong ones and forgeries must not.

Run before spending money on agents: a broken evaluation environment (missing library, wrong version,
no sandbox) shows up as failing references; a lax checker shows up as passing wrong answers; an
evaluator that runs the submission where the verdict is made, or lets it read the expected answer,
shows up as a passing forgery probe (a verdict a submission can forge is a reward an agent learns to).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from recreate.domains.base import Domain, Evaluation, Task
from recreate.sandbox.base import Sandbox

PROBES_DIR = Path(__file__).parent / "probes"  # forgery submissions, shared by every domain
PROBED_TASKS = 4  # forgery probes test the evaluator, not the tasks: a few tasks tell
# Python submissions, for evaluators that run submitted Python (anywhere else they simply fail)
FORGERY_PROBES = {
    "prints a passing verdict and exits 0": "forgery_print_pass.py",
    "reads every file it can see and prints it": "forgery_read_everything.py",
}


@dataclass
class TaskCheck:
    task_id: str
    group: str
    reference: Evaluation | None = None  # None: the task has no reference solution
    wrong: dict[str, Evaluation] = field(default_factory=dict)  # submission -> evaluation
    forgeries: dict[str, Evaluation] = field(default_factory=dict)  # probe name -> evaluation

    @property
    def false_passes(self) -> list[str]:
        return [submission for submission, ev in self.wrong.items() if ev.passed]

    @property
    def forgery_passes(self) -> list[str]:
        return [name for name, ev in self.forgeries.items() if ev.passed or ev.score > 0]


@dataclass
class SelfTestReport:
    domain: str
    checks: list[TaskCheck]

    def groups(self) -> dict[str, dict[str, int]]:
        """group -> tasks, with_reference, reference_pass, wrong_pass (tasks where any wrong one passed)."""
        counts: dict[str, dict[str, int]] = defaultdict(
            lambda: {"tasks": 0, "with_reference": 0, "reference_pass": 0, "wrong_pass": 0}
        )
        for check in sorted(self.checks, key=lambda c: c.group):
            row = counts[check.group]
            row["tasks"] += 1
            row["with_reference"] += check.reference is not None
            row["reference_pass"] += bool(check.reference and check.reference.passed)
            row["wrong_pass"] += bool(check.false_passes)
        return dict(counts)

    @property
    def reference_failures(self) -> list[TaskCheck]:
        return [c for c in self.checks if c.reference is not None and not c.reference.passed]

    @property
    def false_passes(self) -> list[TaskCheck]:
        return [c for c in self.checks if c.false_passes]

    @property
    def forgery_passes(self) -> list[TaskCheck]:
        return [c for c in self.checks if c.forgery_passes]

    def reference_pass_rate(self) -> float:
        with_reference = sum(c.reference is not None for c in self.checks)
        return 1.0 if not with_reference else 1 - len(self.reference_failures) / with_reference

    def summary_line(self) -> str:
        with_reference = sum(c.reference is not None for c in self.checks)
        passed = with_reference - len(self.reference_failures)
        probed = sum(bool(c.forgeries) for c in self.checks)
        wrong = len(self.false_passes)
        return (
            f"reference_pass={passed}/{with_reference} wrong_pass={wrong}/{len(self.checks)} "
            f"forgery_pass={len(self.forgery_passes)}/{probed}"
        )


def wrong_submissions(domain: Domain, task: Task) -> list[str]:
    provider = getattr(domain, "wrong_submissions", None)
    return list(provider(task)) if callable(provider) else [""]


def forgery_probes(task: Task) -> dict[str, str]:
    """Submissions that try to forge a pass instead of solving the task; none may score above 0."""
    return {
        name: (PROBES_DIR / script).read_text().replace('"__TASK_ID__"', repr(task.id))
        for name, script in FORGERY_PROBES.items()
    }


def probed_tasks(tasks: list[Task]) -> list[Task]:
    return [t for t in tasks if not t.metadata.get("invalid")][:PROBED_TASKS]


def run_selftest(
    domain: Domain,
    sandbox: Sandbox,
    tasks: list[Task],
    *,
    concurrency: int = 2,
    on_done: Callable[[], None] | None = None,
) -> SelfTestReport:
    """Evaluate every task's reference and wrong submissions, `concurrency` evaluations at a time.
    `on_done` is called after each evaluation (progress display)."""
    checks = {t.id: TaskCheck(t.id, str(t.metadata.get("category", "all"))) for t in tasks}
    jobs: list[tuple[Task, str, str]] = []  # (task, submission, kind: reference | wrong | probe name)
    for task in tasks:
        if task.reference is not None:
            jobs.append((task, task.reference, "reference"))
        jobs.extend((task, wrong, "wrong") for wrong in wrong_submissions(domain, task))
    for task in probed_tasks(tasks):
        jobs.extend((task, probe, name) for name, probe in forgery_probes(task).items())

    def judge(job: tuple[Task, str, str]) -> None:
        task, submission, kind = job
        evaluation = domain.evaluate(task, submission, sandbox)
        if kind == "reference":
            checks[task.id].reference = evaluation
        elif kind == "wrong":
            checks[task.id].wrong[submission] = evaluation
        else:
            checks[task.id].forgeries[kind] = evaluation
        if on_done:
            on_done()

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        list(pool.map(judge, jobs))
    return SelfTestReport(domain.name, [checks[t.id] for t in tasks])


def count_jobs(domain: Domain, tasks: list[Task]) -> int:
    probes = sum(len(forgery_probes(t)) for t in probed_tasks(tasks))
    return probes + sum((t.reference is not None) + len(wrong_submissions(domain, t)) for t in tasks)
