"""A run's rollouts and wall time: counted across sessions, and rollout slots that never overshoot."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from recreate.models import BudgetExceeded
from recreate.optimizer.spend import RunSpend
from recreate.runs import BrokenRun


def test_a_resumed_run_counts_what_it_spent_before(tmp_path: Path) -> None:
    path = tmp_path / "spent.json"
    path.write_text(json.dumps({"rollouts": 3, "wall_s": 50.0}))
    spend = RunSpend(path, max_rollouts=4, max_wall_s=60.0)
    assert spend.rollouts_paid == 3 and spend.wall_s() >= 50.0
    spend.reserve()
    spend.release(paid=True)
    with pytest.raises(BudgetExceeded, match="rollouts"):
        spend.check()
    assert json.loads(path.read_text())["rollouts"] == 4
    with pytest.raises(BudgetExceeded, match="wall_s"):
        RunSpend(path, max_rollouts=None, max_wall_s=10.0).check_wall()


def test_a_slot_waits_for_a_running_rollout_and_a_cached_one_frees_it_unpaid(tmp_path: Path) -> None:
    spend = RunSpend(tmp_path / "spent.json", max_rollouts=1, max_wall_s=None)
    spend.reserve()
    took: list[float] = []
    waiter = threading.Thread(target=lambda: (spend.reserve(), took.append(time.monotonic())))
    waiter.start()
    time.sleep(0.2)
    assert not took  # the one slot is taken by a rollout that may still be paid
    freed = time.monotonic()
    spend.release(paid=False)  # served from the cache: the slot goes to the waiter
    waiter.join(5)
    assert took and took[0] >= freed and spend.rollouts_paid == 0
    spend.release(paid=True)
    with pytest.raises(BudgetExceeded):
        spend.reserve()  # paid up to the limit: no slot left to wait for


@pytest.mark.parametrize(
    "data", ["", '{"rollouts": 3, "wa', "[3]", '{"rollouts": 1.5}', '{"rollouts": 2, "wall_s": NaN}']
)
def test_a_damaged_record_is_one_line_naming_the_file_and_left_as_it_was(tmp_path: Path, data: str) -> None:
    path = tmp_path / "spent.json"
    path.write_text(data)
    with pytest.raises(BrokenRun) as caught:
        RunSpend(path, max_rollouts=4, max_wall_s=None)
    assert str(caught.value).startswith(f"{path} ") and "\n" not in str(caught.value)
    assert path.read_text() == data
