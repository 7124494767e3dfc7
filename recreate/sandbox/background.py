"""Opening and closing sessions off the caller's path, on two small thread pools."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from recreate.pools import ThreadPool
from recreate.sandbox.base import Sandbox, SandboxSpec, Session

_CLOSER = ThreadPool(4, "recreate-sandbox-close")
_OPENER = ThreadPool(4, "recreate-sandbox-open")


def open_soon(
    sandbox: Sandbox | Callable[[SandboxSpec | None], Session],
    spec: SandboxSpec | None = None,
    then: Callable[[Session], Any] | None = None,
) -> Future[Session]:
    """Open a session in the background, for a caller with a slow step (a model call) to do before it
    needs the session; `then(session)` (e.g. copying the task's files in) runs there too, and a session
    it fails on is closed. Hand a future that ends up unused to `close_when_opened`. `sandbox` may also
    be a backend's own open function (its spares use it)."""
    opener = sandbox if callable(sandbox) else sandbox.open

    def open_and_prepare() -> Session:
        session = opener(spec)
        if then is not None:
            try:
                then(session)
            except BaseException:
                close_soon(session)
                raise
        return session

    return _OPENER.submit(open_and_prepare)


def close_when_opened(opening: Future[Session]) -> None:
    """Close the session of an `open_soon` future once it is open (at once if it is); failed opens
    have nothing to close."""

    def close(done: Future[Session]) -> None:
        if not done.cancelled() and done.exception() is None:
            close_soon(done.result())

    opening.add_done_callback(close)


def close_soon(session: Session) -> None:
    """Close a finished session off the caller's path: tearing a sandbox down takes ~0.1 s, and what
    comes next (an evaluation in another sandbox, the next model call) need not wait for it. Pending
    closes finish before the interpreter exits; once it is exiting (the pool takes no more), this
    closes the session here."""
    try:
        _CLOSER.submit(session.close)
    except RuntimeError:  # "cannot schedule new futures after (interpreter) shutdown"
        session.close()
