"""Sandboxes: where every model-written command and tool runs.

    with get_sandbox("bwrap").open(SandboxSpec(persistent=True)) as session:
        session.put("main.py", "print(1)")
        result = session.run("python3 main.py", timeout=30)

Backends: `bwrap` (default on Linux), `docker` (any Docker Engine API, incl. Podman's), `local`
(no isolation; explicit opt-in only).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from recreate.sandbox.background import close_soon, close_when_opened, open_soon
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


@contextmanager
def fresh_session(sandbox: Sandbox, spec: SandboxSpec | None = None) -> Iterator[Session]:
    """A session for one job (an evaluation, a rollout), closed with `close_soon` when it is done."""
    session = sandbox.open(spec)
    try:
        yield session
    finally:
        close_soon(session)
