"""Run a Python snippet in a child process that must end within a deadline: for checks whose failure
mode is a hang (a backtracking regex holds the GIL, so no thread of the test could stop it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def python_within(code: str, *, hung: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """`code` run by this interpreter from the repository root; the test fails with `hung` if it is still
    running after `timeout_s`, and with the child's stderr if it exits non-zero."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        pytest.fail(hung)
    assert done.returncode == 0, done.stderr
    return done
