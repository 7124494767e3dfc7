"""Sandboxes: where every model-written command and tool runs.

    with get_sandbox("bwrap").open(SandboxSpec(persistent=True)) as session:
        session.put("main.py", "print(1)")
        result = session.run("python3 main.py", timeout=30)

Backends: `bwrap` (default on Linux), `docker` (any Docker Engine API, incl. Podman's), `local`
(no isolation; explicit opt-in only).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from recreate.sandbox.base import DEFAULT_OUTPUT_LIMIT, Result, Sandbox, SandboxError, SandboxSpec, Session

BACKENDS = ("bwrap", "docker", "local")
DEFAULT_BACKEND = "bwrap" if sys.platform.startswith("linux") else "docker"

__all__ = [
    "close_soon",
    "close_when_opened",
    "open_soon",
    "fresh_session",
    "BACKENDS",
    "DEFAULT_BACKEND",
    "DEFAULT_OUTPUT_LIMIT",
    "Result",
    "Sandbox",
    "SandboxError",
    "SandboxSpec",
    "Session",
    "backend_status",
    "get_sandbox",
    "resolve_sandbox",
]


def get_sandbox(name: str = DEFAULT_BACKEND, **options: Any) -> Sandbox:
    """The backend called `name`; `options` go to its constructor (e.g. `image=` for docker,
    `base_dir=` for the session directories of bwrap/local)."""
    if name == "bwrap":
        from recreate.sandbox.bwrap import BwrapSandbox

        return BwrapSandbox(**options)
    if name == "docker":
        from recreate.sandbox.docker import DockerSandbox

        return DockerSandbox(**options)
    if name == "local":
        from recreate.sandbox.local import LocalSandbox

        return LocalSandbox(**options)
    raise SandboxError(f"unknown sandbox backend {name!r}; available: {', '.join(BACKENDS)}")


def resolve_sandbox(sandbox: str | Sandbox) -> Sandbox:
    """`sandbox` itself, or the backend it names (with default options)."""
    return get_sandbox(sandbox) if isinstance(sandbox, str) else sandbox


def backend_status() -> list[tuple[str, bool, str]]:
    """(name, works here?, detail or fix) for every backend, for `recreate doctor`."""
    rows = []
    for name in BACKENDS:
        try:
            ok, detail = get_sandbox(name).available()
        except SandboxError as exc:
            ok, detail = False, str(exc)
        rows.append((name, ok, detail))
    return rows


_CLOSER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="recreate-sandbox-close")
_OPENER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="recreate-sandbox-open")


def open_soon(
    sandbox: Sandbox, spec: SandboxSpec | None = None, then: Callable[[Session], Any] | None = None
) -> Future[Session]:
    """Open a session in the background, for a caller with a slow step (a model call) to do before it
    needs the session; `then(session)` (e.g. copying the task's files in) runs there too, and a session
    it fails on is closed. Hand a future that ends up unused to `close_when_opened`."""

    def open_and_prepare() -> Session:
        session = sandbox.open(spec)
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
    closes finish before the interpreter exits."""
    _CLOSER.submit(session.close)


@contextmanager
def fresh_session(sandbox: Sandbox, spec: SandboxSpec | None = None) -> Iterator[Session]:
    """A session for one job (an evaluation, a rollout), closed with `close_soon` when it is done."""
    session = sandbox.open(spec)
    try:
        yield session
    finally:
        close_soon(session)
