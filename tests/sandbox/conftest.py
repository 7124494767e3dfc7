"""Sessions on every backend that works here: `open_session(**spec_fields)` opens one and closes it
after the test."""

from __future__ import annotations

import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from recreate.sandbox import SandboxSpec, get_sandbox
from recreate.sandbox.base import Session
from recreate.sandbox.local import NoIsolationWarning
from tests.podman import busybox_image, docker_host  # noqa: F401 - fixtures

OpenSession = Callable[..., Session]
ALL_BACKENDS = ["local", "bwrap", "docker"]
ISOLATING = ["bwrap", "docker"]


def host_processes(needle: str) -> list[int]:
    """Host pids whose command line contains `needle` (sandboxed processes are visible from here)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if needle in cmdline:
                found.append(int(entry.name))
    return found


def wait_until_running(needle: str, seconds: float = 10.0) -> list[int]:
    """`host_processes(needle)` once it finds something: a command started with `&` may still be a
    forked shell, not yet the program it execs, when the command that started it returns."""
    deadline = time.monotonic() + seconds
    while not (found := host_processes(needle)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def _make_opener(request: pytest.FixtureRequest, backend: str) -> Iterator[OpenSession]:
    options: dict[str, str] = {}
    if backend == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install -y bubblewrap)")
    if backend == "docker":
        options["image"] = request.getfixturevalue("busybox_image")
    sandbox = get_sandbox(backend, **options)
    sessions: list[Session] = []

    def open_session(**fields: object) -> Session:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NoIsolationWarning)
            session = sandbox.open(SandboxSpec(**fields))  # type: ignore[arg-type]
        sessions.append(session)
        return session

    yield open_session
    for session in sessions:
        session.close()


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A temp dir the sandbox's unprivileged uid can read (pytest's own tmp dirs are private)."""
    path = Path(tempfile.mkdtemp(prefix="recreate-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=ALL_BACKENDS)
def open_session(request: pytest.FixtureRequest) -> Iterator[OpenSession]:
    yield from _make_opener(request, request.param)


@pytest.fixture(params=ISOLATING)
def open_isolated(request: pytest.FixtureRequest) -> Iterator[OpenSession]:
    """Only the backends that isolate (not `local`)."""
    yield from _make_opener(request, request.param)
