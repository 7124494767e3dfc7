"""The Sandbox contract: where every model-written command and tool runs.

`Sandbox.open(spec) -> Session`; `Session.run(cmd, timeout=...) -> Result`; `put`/`get` move files
in and out of the session's workspace; `close()` kills everything the session started.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol, runtime_checkable

DEFAULT_OUTPUT_LIMIT = 64 * 1024  # bytes kept per stream (head + tail)


@dataclass(frozen=True)
class SandboxSpec:
    """What a session needs. Backends ignore fields that do not apply to them."""

    image: str | None = None  # docker image, or a rootfs directory for bwrap
    workdir: str = "/workspace"  # path of the workspace as seen inside the sandbox
    env: dict[str, str] = field(default_factory=dict)  # extra env vars (allow-listed, no secrets)
    network: bool = False
    memory_mb: int = 2048  # all of a session's processes together where a cgroup is available
    cpu_seconds: int = 600
    max_processes: int = 256
    max_file_mb: int = 512  # per file; also the size of /tmp
    disk_mb: int = 1024  # the whole workspace (bwrap: a tmpfs of this size, counted in memory_mb too)
    cpus: float = 1.0
    persistent: bool = False  # cd/env persist across run() calls
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    ro_binds: tuple[tuple[str, str], ...] = ()  # (host path, sandbox path), read-only
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Result:
    stdout: str
    stderr: str
    exit_code: int | None
    duration_s: float
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_bytes: int = 0  # total produced, before capping
    stderr_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class SandboxError(RuntimeError):
    """The sandbox itself failed (backend unavailable, path escape, closed session)."""


@runtime_checkable
class Session(Protocol):
    backend: str

    def run(self, cmd: str, *, timeout: float = 60.0, env: dict[str, str] | None = None) -> Result: ...

    def put(self, path: str, data: bytes | str | IO[bytes] | Path) -> None: ...

    def get(self, path: str) -> bytes: ...

    def close(self) -> None: ...

    def __enter__(self) -> Session: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class Sandbox(Protocol):
    name: str

    def open(self, spec: SandboxSpec | None = None) -> Session: ...

    def available(self) -> tuple[bool, str]:
        """(works here?, reason or fix)."""
        ...


class ClosingSession:
    """Lifecycle plumbing shared by the backends' sessions: a context manager, a best-effort close
    when garbage-collected, and a clear error for use after close. Subclasses define `close()`."""

    backend: str
    closed: bool = False
    _opened_by: int | None = None  # the process that opened the session

    def __new__(cls, *args: object, **kwargs: object) -> ClosingSession:
        session = super().__new__(cls)
        session._opened_by = os.getpid()
        return session

    def close(self) -> None:  # overridden by every backend
        self.closed = True

    def __enter__(self) -> ClosingSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if self._opened_by != os.getpid():  # a forked child's copy: the session is its parent's
            return
        with contextlib.suppress(Exception):
            self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise SandboxError(f"this {self.backend} session is closed")
