"""A RECREATE_HOME the sandbox's unprivileged uid cannot enter (a 0700 or 0750 home) keeps the DS-1000
environment where the sandbox can read it, as the repo domain's test environments."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from recreate import envbuild
from recreate.domains.ds1000 import env as ds1000_env

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the shared place is root's")


@pytest.fixture
def reachable(tmp_path: Path):
    """A folder every uid can enter (pytest's own tmp_path sits under a 0700 folder)."""
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        os.chmod(folder, 0o755)
        yield Path(folder)


@pytest.mark.parametrize("mode", [0o700, 0o750])
def test_a_private_home_keeps_the_environment_in_the_shared_place(reachable, monkeypatch, mode):
    monkeypatch.delenv("RECREATE_DS1000_ENV", raising=False)
    tmp_path = reachable
    private = tmp_path / "user"
    private.mkdir(mode=mode)
    private.chmod(mode)
    assert ds1000_env.default_env_path(private / ".recreate") == envbuild.SHARED_ENVS / "ds1000"
    open_home = tmp_path / "open"
    open_home.mkdir(mode=0o755)
    open_home.chmod(0o755)
    assert ds1000_env.default_env_path(open_home / ".recreate") == open_home / ".recreate" / "envs" / "ds1000"


def test_a_shared_place_others_could_write_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("RECREATE_DS1000_ENV", raising=False)
    planted = tmp_path / "recreate-envs"
    planted.mkdir()
    planted.chmod(0o777)  # anyone could have put a venv there
    monkeypatch.setattr(envbuild, "SHARED_ENVS", planted)
    private = tmp_path / "user"
    private.mkdir(mode=0o700)
    with pytest.raises(envbuild.EnvBuildError, match="closed to others' writes.*RECREATE_DS1000_ENV"):
        ds1000_env.default_env_path(private / ".recreate")


def test_the_variable_still_decides(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("RECREATE_DS1000_ENV", str(tmp_path / "mine"))
    assert ds1000_env.default_env_path(tmp_path) == tmp_path / "mine"
