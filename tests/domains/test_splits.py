from collections import defaultdict

import pytest

from recreate.domains import LeakageError, SplitPlan, Task, check_no_leakage
from recreate.domains.splits import check_unique_ids, select


def _tasks(n: int, group_size: int = 1) -> list[Task]:
    return [
        Task(id=f"t{i}", prompt="p", group=f"g{i // group_size}" if group_size > 1 else None)
        for i in range(n)
    ]


def test_splits_partition_the_tasks_and_are_deterministic():
    tasks = _tasks(200)
    plan = SplitPlan(seed=7)
    parts = {s: [t.id for t in select(tasks, s, plan)] for s in ("train", "val", "test")}
    assert sorted(sum(parts.values(), [])) == sorted(t.id for t in tasks)
    assert all(parts.values())
    again = {s: [t.id for t in select(_tasks(200), s, SplitPlan(seed=7))] for s in parts}
    assert again == parts
    other_seed = [t.id for t in select(tasks, "train", SplitPlan(seed=8))]
    assert other_seed != parts["train"]
    assert 70 <= len(parts["train"]) <= 130  # about half


def test_adding_tasks_never_moves_existing_ones():
    plan = SplitPlan(seed=1)
    before = {t.id: plan.split_of(t.id) for t in _tasks(50)}
    after = {t.id: plan.split_of(t.id) for t in _tasks(80)}
    assert all(after[k] == v for k, v in before.items())


def test_groups_never_straddle_splits():
    tasks = _tasks(120, group_size=4)
    where = defaultdict(set)
    for split in ("train", "val", "test"):
        for task in select(tasks, split, SplitPlan(seed=3)):
            where[task.group].add(split)
    assert len(where) == 30
    assert all(len(splits) == 1 for splits in where.values())


def test_bad_fractions_and_split_names_are_refused():
    with pytest.raises(ValueError, match="train \\+ val <= 1"):
        SplitPlan(train=0.8, val=0.3)
    with pytest.raises(ValueError, match="unknown split"):
        select(_tasks(3), "dev", SplitPlan())


def test_leakage_check_names_the_overlap():
    check_no_leakage(["a", "b"], ["c", "d"])
    with pytest.raises(LeakageError, match="2 test task\\(s\\) were used to evolve.*a, b"):
        check_no_leakage(["a", "b", "x"], ["b", "a", "c"])


def test_duplicate_ids_are_refused():
    with pytest.raises(ValueError, match="duplicate task id.*t1"):
        check_unique_ids([Task("t1", "p"), Task("t1", "q")], "file.jsonl")
