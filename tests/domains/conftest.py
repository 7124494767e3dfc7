"""Fixtures for domain tests: a real bwrap sandbox, the pinned DS-1000 env, the shared benchmark data."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def bwrap():
    """The real bubblewrap sandbox backend (skipped with the reason where it cannot run)."""
    from recreate.sandbox import get_sandbox

    sandbox = get_sandbox("bwrap")
    ok, reason = sandbox.available()
    if not ok:
        pytest.skip(f"bwrap sandbox unavailable: {reason}")
    return sandbox


@pytest.fixture(scope="session")
def ds1000_env() -> Path:
    """The pinned DS-1000 venv with its optional library groups (PyTorch, TensorFlow), built once into a
    cache that outlives test runs (about 3 min online)."""
    from recreate.domains.common import others_can_read
    from recreate.domains.ds1000.env import GROUPS, EnvBuildError, ensure_env

    if os.environ.get("RECREATE_DS1000_ENV"):
        target = Path(os.environ["RECREATE_DS1000_ENV"])
    elif os.geteuid() == 0 and not others_can_read(REPO):
        target = Path(tempfile.gettempdir()) / "recreate-ds1000-env"  # the sandbox uid cannot reach the repo
    else:
        target = REPO / ".recreate" / "envs" / "ds1000"
    try:
        return ensure_env(target, extras=GROUPS)
    except EnvBuildError as exc:
        pytest.skip(f"cannot build the DS-1000 environment (offline without a wheelhouse?): {exc}")


@pytest.fixture
def open_tmp():
    """A temporary folder the sandbox's unprivileged uid can read (pytest's tmp_path is private to root),
    for evaluator folders that get bound into sandboxes."""
    path = Path(tempfile.mkdtemp(prefix="recreate-domain-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)
