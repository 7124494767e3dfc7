"""Sessions opened ahead of need: a backend hands out a spare session when it has one of the spec asked
for, and opens the next spare in the background.

An evolve run opens a few sessions per task, each with one of a handful of specs (the agent's, the
evaluator's, the meta-agent's), and each open is on the task's critical path (~15 ms for bwrap on an idle
machine, several times that under load; ~0.2 s for a container). A spare is made for a spec from its
`ASKS_BEFORE_SPARES`-th open on, one at a time per spec, for at most `MAX_SPECS` specs (the least
recently asked-for spec's spare is closed). A spec opened a few times only (a probe; a repository task's
own image, run with two seeds) gets none, so no container is started for nothing; the specs an evolve
run opens for every task get one each from their third task on. A spare is as fresh as
any session: nothing runs in it before it is handed out. A spare that failed to open is not an error: the
caller opens one itself, and that open's error is the caller's.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future

from recreate.sandbox.background import close_when_opened, open_soon
from recreate.sandbox.base import SandboxSpec, Session

MAX_SPECS = 8
ASKS_BEFORE_SPARES = 3
_OPEN_WAIT_S = 120.0


class Spares:
    """Spare sessions of one backend object, made by `open_session(spec)` (its uncached open)."""

    def __init__(self, open_session: Callable[[SandboxSpec | None], Session]) -> None:
        self._open = open_session
        self._lock = threading.Lock()
        self._asked: OrderedDict[str, int] = OrderedDict()  # spec key -> opens asked, most recent last
        self._ready: dict[str, Future[Session]] = {}

    def open(self, spec: SandboxSpec) -> Session:
        key = repr(spec)
        with self._lock:
            spare = self._ready.pop(key, None)
            self._asked[key] = self._asked.pop(key, 0) + 1
            if self._asked[key] >= ASKS_BEFORE_SPARES:
                self._ready[key] = open_soon(self._open, spec)
            evicted = self._evict()
        for future in evicted:
            close_when_opened(future)
        if spare is not None:
            try:
                return spare.result()
            except Exception:  # a spare that failed: this caller's own open says what is wrong
                pass
        return self._open(spec)

    def _evict(self) -> list[Future[Session]]:
        evicted = []
        while len(self._asked) > MAX_SPECS:
            key, _ = self._asked.popitem(last=False)
            if key in self._ready:
                evicted.append(self._ready.pop(key))
        return evicted

    def close(self) -> None:
        """Close every spare, waiting for those still opening; asked-for counts start again."""
        with self._lock:
            ready, self._ready = list(self._ready.values()), {}
            self._asked.clear()
        for future in ready:
            with contextlib.suppress(Exception):  # a spare that failed to open has nothing to close
                future.result(timeout=_OPEN_WAIT_S).close()
