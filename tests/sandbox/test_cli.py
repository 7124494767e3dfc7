"""`recreate sandbox ...`, `get_sandbox` and `backend_status`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from recreate.sandbox import BACKENDS, SandboxError, SandboxSpec, backend_status, get_sandbox
from recreate.sandbox.local import NoIsolationWarning
from recreate.sandbox.shell import host_secret_names


def recreate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recreate", *args], capture_output=True, text=True, timeout=120
    )


def test_unknown_backend_names_the_available_ones() -> None:
    with pytest.raises(SandboxError, match="available: bwrap, docker, local"):
        get_sandbox("firecracker")


def test_local_warns_that_it_is_not_isolation() -> None:
    with pytest.warns(NoIsolationWarning, match="does not isolate"):
        get_sandbox("local").open(SandboxSpec()).close()


def test_backend_status_covers_every_backend() -> None:
    rows = backend_status()
    assert [name for name, _, _ in rows] == list(BACKENDS)
    assert all(isinstance(ok, bool) and detail for _, ok, detail in rows)
    assert dict((name, ok) for name, ok, _ in rows)["local"] is True


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_sandbox_run_prints_output_and_passes_the_exit_code() -> None:
    done = recreate("sandbox", "run", "--sandbox", "bwrap", "--", "echo hi; echo oops >&2; exit 3")
    assert (done.stdout, done.stderr, done.returncode) == ("hi\n", "oops\n", 3)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_sandbox_run_reports_a_timeout() -> None:
    done = recreate("sandbox", "run", "--timeout", "0.5", "--", "sleep", "30")
    assert done.returncode == 124 and "timed out" in done.stderr


def test_sandbox_run_with_an_unknown_backend_is_one_clear_line() -> None:
    done = recreate("sandbox", "run", "--sandbox", "nope", "--", "true")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: Invalid value for '--sandbox': unknown sandbox backend 'nope'")


def test_sandbox_status_lists_backends() -> None:
    done = recreate("sandbox", "status")
    for name in BACKENDS:
        assert name in done.stdout


def test_the_cli_says_a_warning_once_in_one_line(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in host_secret_names()}  # local refuses those
    done = subprocess.run(
        [sys.executable, "-m", "recreate", "sandbox", "run", "--sandbox", "local", "--", "echo hi"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == "hi\n"
    said = [line for line in done.stderr.splitlines() if "does not isolate" in line]
    assert said == [line for line in done.stderr.splitlines() if line.strip()]  # nothing else: no source line
    assert len(said) == 1 and said[0].startswith("warning: the 'local' sandbox backend does not isolate")
