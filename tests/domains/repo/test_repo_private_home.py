"""A project in a private home directory (0700 or 0750, the default on many distributions): the repo
domain builds its test environment where the sandbox's unprivileged uid can read it, and judges."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from recreate import envbuild
from recreate.domains import get_domain
from recreate.domains.repo.env import ensure_env, env_path
from recreate.domains.repo.instance import RepoEnvironment
from recreate.envbuild import EnvBuildError
from recreate.sandbox import fresh_session
from tests.domains.repo.helpers import EXAMPLES, public_dir

pytestmark = pytest.mark.bwrap


@pytest.fixture(params=[0o700, 0o750])
def private_home(request, monkeypatch):
    top = Path(tempfile.mkdtemp(prefix="recreate-private-"))
    top.chmod(request.param)
    monkeypatch.setenv("RECREATE_HOME", str(top / "home" / ".recreate"))
    monkeypatch.delenv("RECREATE_REPO_ENVS", raising=False)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def test_a_private_home_judges_and_runs_the_agent_sandbox(private_home, bwrap):
    try:
        env = ensure_env(RepoEnvironment(), echo=lambda _: None)
    except EnvBuildError as exc:
        pytest.skip(f"cannot build the repo test environment (offline without a wheelhouse?): {exc}")
    domain = get_domain("repo", data=EXAMPLES / "parse-1.22.4.jsonl")
    task = domain.tasks()[0]
    assert domain.env_for(domain.instance(task)) == env
    evaluation = domain.evaluate(task, task.reference, bwrap)
    assert evaluation.passed, evaluation.feedback
    assert not domain.evaluate(task, "", bwrap).passed
    with fresh_session(bwrap, domain.agent_spec()) as session:
        domain.prepare(task, session)
        ran = session.run("python -c 'import pytest; print(pytest.__version__)'", timeout=60)
    assert ran.ok and ran.stdout.strip() == "8.3.5", ran


def test_an_open_home_keeps_its_environments(monkeypatch):
    home = public_dir("recreate-open-home-")
    monkeypatch.delenv("RECREATE_REPO_ENVS", raising=False)
    try:
        assert env_path(RepoEnvironment(), home).parent == home / "envs"
    finally:
        shutil.rmtree(home)


def test_a_shared_folder_others_can_write_is_refused(monkeypatch, tmp_path):
    planted = tmp_path / "envs"
    planted.mkdir()
    planted.chmod(0o777)
    monkeypatch.setattr(envbuild, "SHARED_ENVS", planted)
    monkeypatch.setattr(envbuild.os, "geteuid", lambda: 0)
    home = tmp_path / "private"
    home.mkdir(mode=0o700)
    monkeypatch.delenv("RECREATE_REPO_ENVS", raising=False)
    with pytest.raises(EnvBuildError, match="RECREATE_REPO_ENVS"):
        env_path(RepoEnvironment(), home)
