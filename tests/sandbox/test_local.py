"""`local` keeps its promise or refuses: unprivileged, its commands could read our environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import FAKE_KEY

REPO = Path(__file__).resolve().parents[2]
_OPEN_LOCAL = """
import warnings
from recreate.sandbox import get_sandbox
warnings.simplefilter("ignore")
with get_sandbox("local").open() as session:
    print(session.run("echo opened", timeout=30).stdout, end="")
"""


def _unprivileged(extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`_OPEN_LOCAL` run by an unprivileged user (nobody, when we are root)."""
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] if os.geteuid() == 0 else []
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), **extra_env}
    return subprocess.run(
        [*drop, sys.executable, "-c", _OPEN_LOCAL],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd="/",
    )


def test_unprivileged_local_refuses_while_a_secret_is_in_the_environment() -> None:
    refused = _unprivileged({"OPENAI_API_KEY": FAKE_KEY})
    assert refused.returncode != 0 and refused.stdout == ""
    assert "the 'local' sandbox refuses to run while OPENAI_API_KEY is set" in refused.stderr
    assert FAKE_KEY not in refused.stderr
    assert _unprivileged({}).stdout == "opened\n"
