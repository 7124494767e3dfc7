"""Session machinery shared by the backends whose workspace is a directory on this host (local, bwrap)."""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import signal
import stat
import tempfile
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from recreate.sandbox.base import ClosingSession, Result, SandboxError, SandboxSpec
from recreate.sandbox.cgroups import SessionCgroup, remove_cgroup
from recreate.sandbox.commands import CommandRunner, RunnerGone
from recreate.sandbox.process import (
    KILLER_UID,
    UID_BASE,
    UID_SPAN,
    birth,
    boot_ticks,
    kill_late_orphans,
    kill_marked,
    kill_tree,
    owner_alive,
    owner_label,
    start_ticks,
)
from recreate.sandbox.runner import kill_every_process_of
from recreate.sandbox.shell import MARKER, shell_argv
from recreate.sandbox.workspace import as_bytes, read_file, workspace_parts, write_file
from recreate.sandbox.zygote import forget_uid, watch_uid

_MB = 1024 * 1024
OWNER_FILE = "owner"
# What a session leaves in its directory so that the next open can clean up after a killed owner.
UID_FILE, CGROUP_FILE, KEEPER_FILE = "uid", "cgroup", "keeper"
_OPEN_SESSIONS: weakref.WeakSet[HostSession] = weakref.WeakSet()
os.register_at_fork(after_in_child=_OPEN_SESSIONS.clear)
_reaped: set[tuple[str, str | None]] = set()


class HostSession(ClosingSession, ABC):
    """A private session directory (`workspace/`, `tmp/`) owned by the session's uid, and a memory
    cgroup for all of the session's processes where the machine allows one (`cgroups`).

    Commands go through the session's command runner (`commands`), which subclasses start
    (`_start_runner`). A timeout kills all the command started, also what called setsid or
    double-forked: its process tree and group, the processes carrying its marker variable, and
    (where the session's processes are known, `_members`) every process started since the command
    began that descends from no older process of the session and carries no other command's marker.
    (A cgroup per command would do it too, but moving each command into one cost ~0.5 ms here.)
    Subclasses also say what a command's environment is (`_command_env`), where a persistent shell
    keeps its state (`_shell_state`), and what else `close()` must stop (`_stop`).
    """

    backend = "host"
    cgroup: SessionCgroup | None = None

    def __init__(self, spec: SandboxSpec, uid: int | None, base_dir: str | None = None):
        self.spec = spec
        self.uid = uid
        self.owner = (uid, uid) if uid is not None else None
        _reap_stale_roots(self.backend, base_dir)
        self.root = Path(tempfile.mkdtemp(prefix=f"recreate-{self.backend}-", dir=base_dir))
        (self.root / OWNER_FILE).write_text(owner_label())
        self.workspace = self.root / "workspace"
        self.tmp = self.root / "tmp"
        for path in (self.workspace, self.tmp):
            path.mkdir(mode=0o700)
        self.root.chmod(0o711)  # others may only traverse (bwrap needs that to bind the workspace)
        if self.owner is not None:
            for path in (self.root, self.workspace, self.tmp):
                os.chown(path, *self.owner)
            (self.root / UID_FILE).write_text(str(uid))
        try:
            if uid is not None:
                watch_uid(uid)  # before anything runs as it: whatever we are killed amid, it ends
            self.cgroup = SessionCgroup.create(spec.memory_mb)
        except BaseException:
            if uid is not None:
                forget_uid(uid)
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        if self.cgroup is not None:
            (self.root / CGROUP_FILE).write_text(str(self.cgroup.path))
        self.closed = False
        self._runner: CommandRunner | None = None
        self._runner_lock = threading.Lock()
        self._token = secrets.token_hex(8)
        _OPEN_SESSIONS.add(self)

    def _check_alive(self) -> None:
        """Raise SandboxError if what the session runs in has gone (nothing to check by default)."""

    def start_runner(self) -> None:
        """Start the session's command runner now (at the end of a subclass's open: it gets ready
        while the caller goes on), closing the session if that fails."""
        try:
            self._live_runner()
        except BaseException:
            self.close()
            raise

    def cgroup_procs(self) -> Path | None:
        """The cgroup.procs file of the session's cgroup (None when it has none)."""
        return self.cgroup.path / "cgroup.procs" if self.cgroup is not None else None

    def enter_cgroup(self) -> list[str]:
        """argv prefix that puts a command into the session's cgroup (empty when it has none)."""
        return self.cgroup.enter_argv() if self.cgroup is not None else []

    @property
    def workdir(self) -> str:
        """The workspace path as commands see it."""
        return self.spec.workdir

    def run(self, cmd: str, *, timeout: float = 60.0, env: dict[str, str] | None = None) -> Result:
        self._check_open()
        if timeout <= 0:
            raise SandboxError(f"timeout must be positive, got {timeout}")
        self._check_alive()
        runner = self._live_runner()
        marker = f"{self._token}-{secrets.token_hex(8)}"
        full_env = {**self._command_env(env), MARKER: marker}
        started = boot_ticks()

        def kill(pid: int | None) -> None:
            # from the command's birth on; without it (never reported), from the next clock tick on
            since = (birth(pid) if pid is not None else None) or (started + 1, 0)
            if pid is not None:
                kill_tree(pid)
            kill_marked(f"{MARKER}={marker}")
            if self._members() is not None:
                infrastructure = self._infrastructure(runner)
                kill_late_orphans(self._members, since, infrastructure, f"{MARKER}={self._token}-")

        argv = shell_argv(cmd, self._shell_state(), env)
        try:
            try:
                result = runner.run(argv, full_env, timeout, self.spec.output_limit, kill)
            except RunnerGone:  # killed by an earlier command after it answered: a new one runs this
                runner = self._live_runner()
                result = runner.run(argv, full_env, timeout, self.spec.output_limit, kill)
        except SandboxError:
            self._check_alive()  # the sandbox died (a command may kill it): say that instead
            raise
        if result.exit_code == 128 + signal.SIGKILL:  # also how a dying sandbox ends its commands
            self._check_alive()
        return result

    def _live_runner(self) -> CommandRunner:
        """The session's command runner; a new one if a command killed the last (they share a uid)."""
        with self._runner_lock:
            if self._runner is None or self._runner.broken:
                if self._runner is not None:
                    self._runner.close()
                self._runner = None
                self._runner = self._start_runner()
            return self._runner

    def put(self, path: str, data: bytes | str | IO[bytes] | Path) -> None:
        self._check_open()
        content, mode = as_bytes(data)
        with self._file_access():
            write_file(self.workspace, workspace_parts(path, self.workdir), content, mode, self.owner)

    def get(self, path: str) -> bytes:
        self._check_open()
        with self._file_access():
            return read_file(self.workspace, workspace_parts(path, self.workdir), self.spec.max_file_mb * _MB)

    @contextlib.contextmanager
    def _file_access(self) -> Iterator[None]:
        """Around put/get: a backend whose workspace only the session's uid may touch switches to it."""
        yield

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            runner = getattr(self, "_runner", None)
            if runner is not None:
                runner.close()  # with the commands still running
            self._stop()
            if self.uid is None:  # (else killing the uid's processes below gets them all)
                kill_marked(f"{MARKER}={self._token}-")
            if self.uid is not None:
                kill_uid(self.uid)
                forget_uid(self.uid)
            if self.cgroup is not None:
                self.cgroup.remove()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    @abstractmethod
    def _start_runner(self) -> CommandRunner:
        """A configured command runner for this session."""

    @abstractmethod
    def _command_env(self, env: dict[str, str] | None) -> dict[str, str]:
        """The whole environment of a command, with the caller's extra variables `env`."""

    @abstractmethod
    def _members(self) -> list[int] | None:
        """Host pids of the session's processes; None where they cannot be told from others'."""

    def _infrastructure(self, runner: CommandRunner) -> set[int]:
        """Processes of the session that no command started."""
        return {runner.pid}

    @abstractmethod
    def _shell_state(self) -> str | None:
        """Where a persistent session's shell keeps its state (as commands see it); None otherwise."""

    @abstractmethod
    def _stop(self) -> None:
        """Stop whatever the backend keeps running for the session."""


def _reap_stale_roots(backend: str, base_dir: str | None) -> None:
    """Once per process and place: for each session whose owning process died uncleanly, kill what
    it left running (its uid's processes, its keeper, its cgroup) and remove its directory."""
    if (backend, base_dir) in _reaped:
        return
    _reaped.add((backend, base_dir))
    for root in Path(base_dir or tempfile.gettempdir()).glob(f"recreate-{backend}-*"):
        with contextlib.suppress(OSError, ValueError):
            if not owner_alive((root / OWNER_FILE).read_text()) and _kill_leftovers(root):
                shutil.rmtree(root, ignore_errors=True)


def _kill_leftovers(root: Path) -> bool:
    """Kill what a dead owner's session left; False while its cgroup cannot be removed yet (the
    directory then stays, for a later open to finish)."""
    uid_file, keeper_file, cgroup_file = root / UID_FILE, root / KEEPER_FILE, root / CGROUP_FILE
    if _written_by_us(uid_file) and os.geteuid() == 0:
        uid = int(uid_file.read_text())
        if UID_BASE <= uid < UID_BASE + UID_SPAN:
            kill_uid(uid)
    if _written_by_us(keeper_file):
        pid, ticks = keeper_file.read_text().split()
        if start_ticks(int(pid)) == ticks:  # still the keeper, not a process that reused its pid
            kill_tree(int(pid))
    return not _written_by_us(cgroup_file) or remove_cgroup(cgroup_file.read_text())


def _written_by_us(path: Path) -> bool:
    """The session's own uid owns its directory and could plant files there (`local` runs commands
    on the host): trust only regular files that our uid wrote."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()


def record_keeper(root: Path, pid: int) -> None:
    """Note the process that keeps a session alive, for `_kill_leftovers` should we die."""
    (root / KEEPER_FILE).write_text(f"{pid} {start_ticks(pid)}")


@atexit.register
def _close_open_sessions() -> None:
    """At exit, close the sessions this process opened (a forked child starts with none: its exit must
    not close the parent's)."""
    for session in list(_OPEN_SESSIONS):
        with contextlib.suppress(Exception):
            session.close()


def uid_processes(uid: int) -> list[int]:
    """Live (non-zombie) processes of `uid`. /proc/PID belongs to the process's effective uid, so one
    stat per process finds them (reading every status file made this a tenth of an evolve run's CPU);
    our session uids never differ between real and effective."""
    found = []
    for entry in os.scandir("/proc"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                status = Path(entry.path, "status").read_text()
                if status.split("\nState:", 1)[1].split()[0] != "Z":
                    found.append(int(entry.name))
    return found


def kill_uid(uid: int) -> None:
    """Kill every process of a session uid (only ever a uid we handed to one session)."""
    for _ in range(50):
        if not uid_processes(uid):
            return
        kill_every_process_of(uid, KILLER_UID)
        time.sleep(0.02)
