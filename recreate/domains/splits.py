"""Deterministic train/val/test splits that keep groups whole, and the leakage check for `recreate eval`.

A task's split depends only on its group (or id), the seed and the fractions: adding tasks to a dataset
never moves an existing task to another split, and related tasks (DS-1000 perturbations of one origin
problem) always land together.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from recreate.domains.base import Split, Task

SPLITS: tuple[Split, ...] = ("train", "val", "test", "all")


class LeakageError(ValueError):
    """Evaluation tasks overlap the tasks a scaffold was evolved on."""


@dataclass(frozen=True)
class SplitPlan:
    seed: int = 0
    train: float = 0.5
    val: float = 0.25  # test gets the rest

    def __post_init__(self) -> None:
        if not (0 <= self.train <= 1 and 0 <= self.val <= 1 and self.train + self.val <= 1):
            raise ValueError(
                "split fractions must be in [0, 1] with train + val <= 1; "
                f"got train={self.train}, val={self.val}"
            )

    def split_of(self, key: str) -> Split:
        """The split of one group key: a seeded hash mapped onto [0, 1)."""
        digest = hashlib.sha256(f"{self.seed}\0{key}".encode()).digest()
        position = int.from_bytes(digest[:8], "big") / 2**64
        if position < self.train:
            return "train"
        if position < self.train + self.val:
            return "val"
        return "test"


def group_key(task: Task) -> str:
    return task.group if task.group is not None else task.id


def select(tasks: Iterable[Task], split: Split, plan: SplitPlan) -> list[Task]:
    """The tasks of one split, in their original order."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    tasks = list(tasks)
    if split == "all":
        return tasks
    return [t for t in tasks if plan.split_of(group_key(t)) == split]


def check_no_leakage(
    eval_task_ids: Iterable[str], train_task_ids: Iterable[str], *, what: str = "test"
) -> None:
    """Refuse to score tasks the scaffold was evolved on (its train and validation tasks)."""
    seen = set(train_task_ids)
    overlap = sorted({str(t) for t in eval_task_ids} & {str(t) for t in seen})
    if overlap:
        shown = ", ".join(overlap[:10]) + (f" and {len(overlap) - 10} more" if len(overlap) > 10 else "")
        raise LeakageError(
            f"{len(overlap)} {what} task(s) were used to evolve this scaffold ({shown}); a score on them "
            f"would be inflated. Evaluate on a split the scaffold never saw (e.g. --split test with the "
            f"same seed it was evolved with)."
        )


def check_unique_ids(tasks: Iterable[Task], source: str) -> None:
    seen: set[str] = set()
    dupes: list[str] = []
    for task in tasks:
        if task.id in seen:
            dupes.append(task.id)
        seen.add(task.id)
    if dupes:
        raise ValueError(
            f"{source}: duplicate task id(s) {', '.join(sorted(set(dupes))[:10])}; ids must be unique"
        )
