"""Whose failure is it: the machine's, the evaluator's, or the run's own?

A rollout that fails before a verdict is a score only when the scaffold, the task or the submission
caused the failure. These checks tell them apart (`Rollouts` applies them):
- `probe`: the sandbox backend opens a session with the same spec and runs `true` in it. A failure the
  probe repeats is the machine's (bubblewrap missing, a Docker engine gone, no memory left).
- `watched`: a failed sandbox open during an evaluation. A domain may turn it into a zero score with a
  reason; a failed open is never the submission's doing, so the rollout is an error instead.
- `same_failure`: an evaluator that gives no verdict (it raises, or scores 0 with an error) fails the same
  way on a plain wrong answer: its own failure, not the submission's.
- `MachineStreak`: the same machine reason `limit` times in a row stops the run (`MachineDown`), resumably;
  one of its own counts the agent's endpoint failures (`EndpointDown`: a server that died mid-run).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from recreate.evaluation.errors import MachineDown, RunHalted
from recreate.redact import redact
from recreate.sandbox import fresh_session
from recreate.sandbox.base import Sandbox, SandboxSpec, Session

PROBE_TIMEOUT_S = 20.0
STREAK_LIMIT = 3  # machine errors in a row, for one reason, that stop a run
_FAILED_OPENS: ContextVar[list[str] | None] = ContextVar("recreate_failed_opens", default=None)


def one_line(exc: BaseException) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return redact(text)[:500]


def probe(sandbox: Sandbox, spec: SandboxSpec | None = None, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when `sandbox` opens a session with `spec` and runs `true` in it; else why not, in one line."""
    try:
        with fresh_session(sandbox, spec) as session:
            result = session.run("true", timeout=timeout)
    except Exception as exc:
        return f"it cannot open a session: {one_line(exc)}"
    if not result.ok:
        why = "timed out" if result.timed_out else f"exit code {result.exit_code}"
        detail = " ".join(result.stderr.split())[-300:]
        return f"`true` fails in it ({why}){': ' + detail if detail else ''}"
    return None


class WatchedSandbox:
    """`sandbox` with its failed opens recorded for the `watching()` block that runs them (same thread)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.inner = sandbox
        self.name = sandbox.name

    def open(self, spec: SandboxSpec | None = None) -> Session:
        try:
            return self.inner.open(spec)
        except Exception as exc:
            failures = _FAILED_OPENS.get()
            if failures is not None:
                failures.append(one_line(exc))
            raise

    def available(self) -> tuple[bool, str]:
        return self.inner.available()

    def __getattr__(self, name: str) -> Any:  # backend settings (base_dir, image) read by a domain
        return getattr(self.inner, name)


_WATCHED: dict[int, WatchedSandbox] = {}
_WATCHED_LOCK = threading.Lock()


def watched(sandbox: Sandbox) -> WatchedSandbox:
    """The one watched wrapper of `sandbox` (one per sandbox: a domain may keep per-sandbox state, such
    as a checker server, keyed by the object it was given)."""
    with _WATCHED_LOCK:
        wrapper = _WATCHED.get(id(sandbox))
        if wrapper is None or wrapper.inner is not sandbox:
            wrapper = _WATCHED[id(sandbox)] = WatchedSandbox(sandbox)
        return wrapper


@contextmanager
def watching() -> Iterator[list[str]]:
    """The failed opens of watched sandboxes inside this block (this thread), as one-line reasons."""
    failures: list[str] = []
    token = _FAILED_OPENS.set(failures)
    try:
        yield failures
    finally:
        _FAILED_OPENS.reset(token)


class MachineStreak:
    """Counts rollouts in a row that failed for one machine reason; at `limit`, every later call raises
    `halt` (default `MachineDown`): the run stops, what it stored is kept, its errors run again on resume."""

    def __init__(self, limit: int = STREAK_LIMIT, halt: type[RunHalted] = MachineDown) -> None:
        self.limit = limit
        self._halt = halt
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._count = 0
        self.halted: RunHalted | None = None

    def check(self) -> None:
        if self.halted is not None:
            raise self.halted

    def record(self, reason: str | None) -> None:
        """One finished rollout: `reason` of its machine or evaluator error, None for any other result."""
        with self._lock:
            if reason is None:
                self._reason, self._count = None, 0
                return
            key = shape(reason)
            self._count = self._count + 1 if key == self._reason else 1
            self._reason = key
            if self._count >= self.limit and self.halted is None:
                self.halted = self._halt(
                    f"{self._count} rollouts in a row failed for the same reason, not the scaffold's: "
                    f"{reason} (they are not scored; fix it and resume)"
                )
        self.check()


def shape(reason: str) -> str:
    """A reason without its numbers and ids, so one cause in several rollouts counts as one."""
    return re.sub(r"[0-9a-f]{6,}|\d+", "#", reason)


def same_failure(first: str, second: str) -> bool:
    return shape(first) == shape(second)
