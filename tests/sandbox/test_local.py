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


def test_local_shows_a_bound_path_only_where_it_is(public_dir: Path) -> None:
    """No mount namespace: a bind that would move a path is refused (a command could not find it there and
    its failure would read as the task's); a bind of a path to itself is what the host shows anyway."""
    import warnings

    import pytest

    from recreate.sandbox import SandboxError, SandboxSpec, get_sandbox

    shared = public_dir / "shared"
    shared.mkdir(mode=0o755)
    (shared / "judge.py").write_text("print('judged')\n")
    (shared / "judge.py").chmod(0o644)
    local = get_sandbox("local")
    with pytest.raises(SandboxError, match=f"cannot show {shared} at /evaluator.*'bwrap' or 'docker'"):
        local.open(SandboxSpec(ro_binds=((str(shared), "/evaluator"),)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with local.open(SandboxSpec(ro_binds=((str(shared), str(shared)),))) as session:
            assert session.run(f"cat {shared}/judge.py", timeout=30).stdout == "print('judged')\n"
