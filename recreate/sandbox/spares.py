"""Sessions opened ahead of need: a backend hands out a spare session when it has one of the spec asked
for, and opens the next spare in the background.

An evolve run opens a few sessions per task, each with one of a handful of specs (the agent's, the
evaluator's, the meta-agent's), and each open is on the task's critical path (~15 ms for bwrap on an idle
machine, several times that under load; ~0.2 s for a container). A spare is made for a spec from its
`ASKS_BEFORE_SPARES`-th open on, for at most `MAX_SPECS` specs (the least recently asked-for spec's
spares are closed). A spec opened a few times only (a probe; a repository task's own image, run with two
seeds) gets none, so no container is started for nothing; the specs an evolve run opens for every task
get one each from their third task on. A spec keeps one spare until a caller finds its spares all still
opening: concurrent tasks ask for the same spec in bursts (at concurrency 8, eight agents open their
sandboxes within milliseconds), so each such miss keeps one more spare of it ready, up to `MAX_DEPTH`,
and `MAX_SPARES` in all.

A spare is as fresh as any session: nothing runs in it before it is handed out, it is built from a copy
of the spec as it was when asked for, and it is handed out once, to one caller. No caller waits for a
spare: one still opening (a burst of callers, a slow engine) leaves the caller to open its own, as does
one that failed to open (that open's error is the caller's) or that died while it waited. Spares belong
to the process that opened them: a forked child starts with none and cannot close its parent's.
"""

from __future__ import annotations

import copy
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future

from recreate.sandbox.background import close_soon, close_when_opened, open_soon
from recreate.sandbox.base import SandboxSpec, Session

MAX_SPECS = 8
MAX_DEPTH = 8  # spares kept ready of one spec
MAX_SPARES = 24  # of all specs (a container each, for docker)
ASKS_BEFORE_SPARES = 3
Opener = Callable[[SandboxSpec | None], Session]
_ALL: weakref.WeakSet[Spares] = weakref.WeakSet()


class Spares:
    """Spare sessions of one backend object, made by `open_session(spec)` (its uncached open);
    `alive(session)` says whether a spare that waited is still usable (default: always)."""

    def __init__(self, open_session: Opener, alive: Callable[[Session], bool] | None = None) -> None:
        # A backend's own method is held weakly: a backend dropped without `close()` is freed at once,
        # and its spares are closed with it (ClosingSession.__del__), not at some later cyclic GC.
        bound = hasattr(open_session, "__self__")
        self._opener: Callable[[], Opener | None] = (
            weakref.WeakMethod(open_session) if bound else lambda: open_session  # type: ignore[arg-type]
        )
        self._alive = alive or (lambda session: True)
        self._lock = threading.Lock()
        self._asked: OrderedDict[str, int] = OrderedDict()  # spec key -> opens asked, most recent last
        self._ready: dict[str, list[Future[Session]]] = {}  # spec key -> spares, oldest first
        self._depth: dict[str, int] = {}  # spec key -> how many spares it keeps
        _ALL.add(self)

    def open(self, spec: SandboxSpec) -> Session:
        key = repr(spec)  # exact: specs that differ in any field (or its order) never share a spare
        opener = self._opener()
        assert opener is not None  # the backend calling us holds it
        with self._lock:
            self._asked[key] = self._asked.pop(key, 0) + 1
            spare = self._take(key)
            if self._asked[key] >= ASKS_BEFORE_SPARES:
                waiting = self._ready.setdefault(key, [])
                in_all = sum(len(futures) for futures in self._ready.values())
                while len(waiting) < self._depth.get(key, 1) and in_all < MAX_SPARES:
                    waiting.append(open_soon(opener, copy.deepcopy(spec)))
                    in_all += 1
            evicted = self._evict()
        for future in evicted:
            close_when_opened(future)
        session = _usable(spare)
        if session is not None and self._alive(session):
            return session
        if session is not None:
            close_soon(session)
        return opener(spec)

    def _take(self, key: str) -> Future[Session] | None:
        """The oldest spare of `key` that opened, handed out exactly once (those whose open failed are
        dropped); None when there is none, and then one more is kept from now on if all were still
        opening."""
        waiting = self._ready.get(key, [])
        for future in [future for future in waiting if future.done()]:
            waiting.remove(future)
            if _usable(future) is not None:
                return future
        if waiting:
            self._depth[key] = min(self._depth.get(key, 1) + 1, MAX_DEPTH)
        return None

    def _evict(self) -> list[Future[Session]]:
        evicted = []
        while len(self._asked) > MAX_SPECS:
            key, _ = self._asked.popitem(last=False)
            evicted += self._ready.pop(key, [])
            self._depth.pop(key, None)
        return evicted

    def close(self) -> None:
        """Close every spare: those open now, those still opening once they are; asked-for counts
        start again."""
        with self._lock:
            ready = [future for futures in self._ready.values() for future in futures]
            self._ready, self._depth = {}, {}
            self._asked.clear()
        for future in ready:
            session = _usable(future)
            if session is not None:
                session.close()
            else:  # still opening (or done since we looked: then closed at once)
                close_when_opened(future)

    def _forget_inherited(self) -> None:
        """In a forked child: the spares are the parent's; start with none. Nothing here may wait on a
        lock: a future's, held by a parent thread at the fork, hung the child (a close's kill child
        among them, whose inherited pipes then kept the parent's sandboxes alive after the parent died).
        The dropped copies never close the parent's sessions (`ClosingSession.__del__`)."""
        self._lock = threading.Lock()  # a parent thread may have held it at the fork
        self._ready, self._depth = {}, {}
        self._asked = OrderedDict()


def _usable(future: Future[Session] | None) -> Session | None:
    """The session of a finished, successful open; else None."""
    if future is None or not future.done() or future.cancelled() or future.exception() is not None:
        return None
    return future.result()


def _after_fork_in_child() -> None:
    for spares in list(_ALL):
        spares._forget_inherited()


os.register_at_fork(after_in_child=_after_fork_in_child)


class SpareKeeping:
    """Base of a backend whose `open` hands out spares: the backend opens a session now with
    `_open_now(spec)` and checks a spare that waited with `session_alive`. A copy of the backend (pickled
    for a Ray worker) starts with no spares, and without what `_process_local` names."""

    session_alive: Callable[[Session], bool] = staticmethod(lambda session: True)
    _process_local: tuple[str, ...] = ()  # attributes a copy starts without (their class defaults)

    _open_now: Callable[[SandboxSpec | None], Session]  # each backend's own uncached open

    def _keep_spares(self) -> None:
        self._spares = Spares(self._open_now, alive=type(self).session_alive)

    def open(self, spec: SandboxSpec | None = None) -> Session:
        return self._spares.open(spec or SandboxSpec())

    def close_spares(self) -> None:
        self._spares.close()

    def __getstate__(self) -> dict[str, object]:
        local = ("_spares", *self._process_local)
        return {k: v for k, v in self.__dict__.items() if k not in local}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._keep_spares()
