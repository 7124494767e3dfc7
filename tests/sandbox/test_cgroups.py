"""Session cgroups (where this machine allows them) and the sweep of what dead owners left behind."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from recreate.sandbox import SandboxSpec, get_sandbox
from recreate.sandbox.cgroups import (
    ENV_PARENT,
    SessionCgroup,
    SessionLimitWarning,
    memory_limit_support,
)
from recreate.sandbox.host import CGROUP_FILE, KEEPER_FILE, OWNER_FILE, UID_FILE, uid_processes
from recreate.sandbox.process import UID_BASE, start_ticks

needs_cgroups = pytest.mark.skipif(
    not memory_limit_support().ok, reason=f"no session cgroups here: {memory_limit_support().detail}"
)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="throwaway uids need root")


def _alive(process: subprocess.Popen[bytes]) -> bool:
    for _ in range(100):
        if process.poll() is not None:
            return False
        time.sleep(0.02)
    return True


@needs_cgroups
def test_a_session_cgroup_holds_its_commands_and_removal_kills_them() -> None:
    cgroup = SessionCgroup.create(64)
    assert cgroup is not None and cgroup.path.name.startswith("recreate-")
    sleeper = subprocess.Popen([*cgroup.enter_argv(), "sleep", "4781"])
    deadline = time.monotonic() + 5
    while sleeper.pid not in cgroup.processes() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cgroup.processes() == [sleeper.pid]
    cgroup.remove()
    assert sleeper.wait(timeout=5) == -9
    assert not cgroup.path.exists()


def test_without_a_usable_cgroup_open_says_so(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV_PARENT, str(tmp_path))
    memory_limit_support.cache_clear()
    try:
        support = memory_limit_support()
        assert not support.ok and f"{ENV_PARENT}={tmp_path}" in support.detail
        warned = pytest.warns(SessionLimitWarning, match="memory limits hold per process, not per session")
        with warned, get_sandbox("bwrap").open(SandboxSpec()) as session:
            assert session.cgroup is None
            assert session.run("echo still works", timeout=30).stdout == "still works\n"
    finally:
        memory_limit_support.cache_clear()


def _stale_root(base: Path) -> Path:
    """A session directory as a SIGKILLed owner leaves it."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    root = base / "recreate-bwrap-stale"
    root.mkdir()
    (root / OWNER_FILE).write_text(f"{os.uname().nodename}/{dead.pid}/1")
    return root


@needs_root
@needs_cgroups
def test_the_next_open_kills_what_a_dead_owner_left(public_dir: Path) -> None:
    root = _stale_root(public_dir)
    uid = UID_BASE + 4242
    as_uid = subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "4782"]
    )
    keeper = subprocess.Popen(["sleep", "4783"], start_new_session=True)
    cgroup = SessionCgroup.create(64)
    assert cgroup is not None
    in_cgroup = subprocess.Popen([*cgroup.enter_argv(), "sleep", "4784"])
    (root / UID_FILE).write_text(str(uid))
    (root / KEEPER_FILE).write_text(f"{keeper.pid} {start_ticks(keeper.pid)}")
    (root / CGROUP_FILE).write_text(str(cgroup.path))
    time.sleep(0.2)
    assert uid_processes(uid) == [as_uid.pid]
    get_sandbox("bwrap", base_dir=str(public_dir)).open().close()
    assert [as_uid.wait(timeout=5), keeper.wait(timeout=5), in_cgroup.wait(timeout=5)] == [-9, -9, -9]
    assert not root.exists() and not cgroup.path.exists()


@needs_root
def test_the_sweep_trusts_only_files_we_wrote(public_dir: Path) -> None:
    root = _stale_root(public_dir)
    bystander = subprocess.Popen(["sleep", "4785"], start_new_session=True)
    planted = root / KEEPER_FILE
    planted.write_text(f"{bystander.pid} {start_ticks(bystander.pid)}")
    os.chown(planted, UID_BASE + 7, UID_BASE + 7)  # as the session's own uid could, from inside `local`
    get_sandbox("bwrap", base_dir=str(public_dir)).open().close()
    assert _alive(bystander) and not root.exists()
    bystander.kill()
    bystander.wait()
