"""Thread pools that survive a fork: a forked child gets fresh ones instead of executors whose
threads exist only in the parent."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class ThreadPool:
    """A ThreadPoolExecutor that a forked child gets afresh: the parent's threads do not exist there,
    and work submitted to the inherited executor would never run (an open in the child hung)."""

    def __init__(self, max_workers: int, name: str) -> None:
        self._settings = {"max_workers": max_workers, "thread_name_prefix": name}
        self._executor = ThreadPoolExecutor(**self._settings)  # type: ignore[arg-type]
        _POOLS.add(self)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        return self._executor.submit(fn, *args, **kwargs)

    def _renew(self) -> None:
        self._executor = ThreadPoolExecutor(**self._settings)  # type: ignore[arg-type]


_POOLS: weakref.WeakSet[ThreadPool] = weakref.WeakSet()
os.register_at_fork(after_in_child=lambda: [pool._renew() for pool in list(_POOLS)])
