"""recreate.pools: a pool a forked child inherits still runs the child's work."""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest

from recreate.pools import ThreadPool


def _runs_work_in_a_forked_child(pool: ThreadPool | ThreadPoolExecutor) -> bool:
    assert pool.submit(os.getpid).result(timeout=10) == os.getpid()  # the parent's threads exist now
    child = os.fork()
    if child == 0:
        code = 1
        try:
            signal.alarm(5)  # a hang ends the child
            code = 0 if pool.submit(os.getpid).result(timeout=4) == os.getpid() else 2
        finally:
            os._exit(code)
    return os.waitpid(child, 0)[1] == 0


@pytest.mark.parametrize("workers", [1, 4])
def test_a_forked_child_gets_a_pool_that_runs_its_work(workers: int) -> None:
    assert _runs_work_in_a_forked_child(ThreadPool(workers, "test-pool"))


def test_the_standard_executor_does_not_which_is_why_ours_exists() -> None:
    with ThreadPoolExecutor(max_workers=1) as executor:
        assert not _runs_work_in_a_forked_child(executor)
