"""Self-test of a domain's evaluation: reference solutions must pass, wrong ones must not.

Run before spending money on agents: a broken evaluation environment (missing library, wrong version,
no sandbox) shows up as failing references; a lax checker shows up as passing wrong answers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from recreate.domains.base import Domain, Evaluation, Task
from recreate.sandbox.base import Sandbox


@dataclass
class TaskCheck:
    task_id: str
    group: str
    reference: Evaluation | None = None  # None: the task has no reference solution
    wrong: dict[str, Evaluation] = field(default_factory=dict)  # submission -> evaluation

    @property
    def false_passes(self) -> list[str]:
        return [submission for submission, ev in self.wrong.items() if ev.passed]


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

    def summary_line(self) -> str:
        with_reference = sum(c.reference is not None for c in self.checks)
        passed = with_reference - len(self.reference_failures)
        return (
            f"reference_pass={passed}/{with_reference} wrong_pass={len(self.false_passes)}/{len(self.checks)}"
        )


def wrong_submissions(domain: Domain, task: Task) -> list[str]:
    provider = getattr(domain, "wrong_submissions", None)
    return list(provider(task)) if callable(provider) else [""]


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
    jobs: list[tuple[Task, str, bool]] = []
    for task in tasks:
        if task.reference is not None:
            jobs.append((task, task.reference, True))
        jobs.extend((task, wrong, False) for wrong in wrong_submissions(domain, task))

    def judge(job: tuple[Task, str, bool]) -> None:
        task, submission, is_reference = job
        evaluation = domain.evaluate(task, submission, sandbox)
        if is_reference:
            checks[task.id].reference = evaluation
        else:
            checks[task.id].wrong[submission] = evaluation
        if on_done:
            on_done()

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        list(pool.map(judge, jobs))
    return SelfTestReport(domain.name, [checks[t.id] for t in tasks])


def count_jobs(domain: Domain, tasks: list[Task]) -> int:
    return sum((t.reference is not None) + len(wrong_submissions(domain, t)) for t in tasks)
