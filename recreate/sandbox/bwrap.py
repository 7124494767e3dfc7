"""`bwrap`: bubblewrap namespaces — read-only root, private workspace, no network, non-root uid.

One bwrap per session keeps the namespaces alive (its only job is to wait on a pipe from us, so the
sandbox ends when we close the pipe); the session's command runner (`runner.py`) joins those
namespaces once, and each `run` is then one spawn of /bin/sh inside (about a bare `sh -c true`)
instead of a new bwrap (~45 ms) or an nsenter chain (~4 ms). Inside, the command runs as uid/gid 65534;
when we are root, the whole sandbox also runs as a throwaway unprivileged host uid, so nothing
root-owned on the host is readable and `close()` can kill every process the session has.

A killed owner takes the sandbox with it: the keeper bwrap gets SIGKILL when the thread that started
it ends (a forked child of ours may still hold the pipe), and the next open in the same place kills
what a dead owner left (`host`). Totals per session: memory through the session's cgroup where the
machine has one (`cgroups`), the workspace and /tmp as tmpfs of `disk_mb` / `max_file_mb`, processes
through RLIMIT_NPROC of the session's own uid (when root).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from recreate.sandbox.base import SandboxError, SandboxSpec
from recreate.sandbox.commands import CommandRunner
from recreate.sandbox.host import HostSession, record_keeper
from recreate.sandbox.process import (
    as_file_user,
    as_user,
    exiting,
    kill_tree,
    limit_args,
    namespace_processes,
    rlimits,
    sandbox_uid,
    wait_readable,
)
from recreate.sandbox.shell import sandbox_env
from recreate.sandbox.spares import SpareKeeping
from recreate.sandbox.zygote import SPAWNER

INSIDE_ID = "65534"
_MB = 1024 * 1024
# Host directories visible (read-only) when no rootfs is given; home directories, /root, /run (sockets),
# /var, /tmp and the project tree stay invisible unless bound through `SandboxSpec.ro_binds`.
HOST_ROOT_ENTRIES = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt")
_NOT_FROM_ROOTFS = {"proc", "dev", "sys", "tmp", "run"}
_STATE = "/tmp/.recreate-shell"
_STARTUP_TIMEOUT = 10.0


class BwrapSession(HostSession):
    backend = "bwrap"

    def __init__(self, spec: SandboxSpec, base_dir: str | None = None):
        super().__init__(spec, sandbox_uid(), base_dir)
        try:
            self._keeper, self._target = self._start()
        except BaseException:
            self.close()
            raise
        record_keeper(self.root, self._keeper.pid)
        self.start_runner()
        # The workspace is a tmpfs inside the sandbox's mount namespace; we reach it through the
        # keeper's root (a path that exists only while the sandbox does).
        self.workspace = Path(f"/proc/{self._target}/root", spec.workdir.lstrip("/"))

    def _start(self) -> tuple[subprocess.Popen[bytes], int]:
        info_read, info_write = os.pipe()
        prefix, user = as_user(self.uid, die_with_us=True)
        with open(self.root / "bwrap.log", "wb") as log:
            keeper = SPAWNER.submit(
                subprocess.Popen,
                self.enter_cgroup()
                + prefix
                + limit_args(self.spec, extra_processes=3)
                + bwrap_argv(self.spec, info_write)
                + ["/bin/sh", "-c", "echo ready; read _"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                pass_fds=(info_write,),
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                start_new_session=True,
                **user,
            ).result()
        os.close(info_write)
        try:
            info = _read_info(info_read)
        finally:
            os.close(info_read)
        # bwrap reports the child pid before it finishes setting up the namespaces (the uid switch
        # happens in a second user namespace); the keeper's first line says setup is complete.
        ready = info is not None and _wait_ready(keeper)
        if not ready:
            kill_tree(keeper.pid)
            keeper.wait(timeout=_STARTUP_TIMEOUT)
            message = (self.root / "bwrap.log").read_text(errors="replace").strip()
            raise SandboxError(f"bubblewrap failed to start: {message or f'exit code {keeper.returncode}'}")
        return keeper, int(info["child-pid"])

    def alive(self) -> bool:
        """Whether the sandbox still runs (a spare that waited is checked before it is handed out)."""
        return self._keeper.poll() is None and not exiting(self._target)

    def _check_alive(self) -> None:
        if not self.alive():
            code = self._keeper.poll()  # which of them went, and how: a kill's signal says who could send it
            how = "its init is exiting" if code is None else f"signal {-code}" if code < 0 else f"exit {code}"
            raise SandboxError(f"the bwrap sandbox has exited (its process was killed: {how})")

    def _start_runner(self) -> CommandRunner:
        self._check_alive()
        return CommandRunner(
            target=self._target,
            uid=int(INSIDE_ID),
            gid=int(INSIDE_ID),
            cgroup_procs=self.cgroup_procs(),
            limits=rlimits(self.spec, extra_processes=1),  # + the runner, one more of the session's uid
        )

    def _command_env(self, env: dict[str, str] | None) -> dict[str, str]:
        return sandbox_env(self.spec.workdir, self.spec.env, env)

    def _members(self) -> list[int] | None:
        return namespace_processes(self._target)

    def _infrastructure(self, runner: CommandRunner) -> set[int]:
        return {runner.pid, self._target}  # the sandbox's init inherits the orphans

    def _shell_state(self) -> str | None:
        return _STATE if self.spec.persistent else None

    @contextmanager
    def _file_access(self) -> Iterator[None]:
        # The workspace tmpfs belongs to the sandbox's user namespace, where root is not mapped: files
        # can only be created there as the session's uid. A live keeper keeps the path its own.
        self._check_alive()
        with as_file_user(self.uid):
            yield

    def _stop(self) -> None:
        keeper = getattr(self, "_keeper", None)
        if keeper is None:
            return
        if keeper.stdin is not None:
            keeper.stdin.close()  # the keeper exits, bwrap follows and the kernel kills the pid namespace
        try:
            keeper.wait(timeout=2)
        except subprocess.TimeoutExpired:
            kill_tree(keeper.pid)
            keeper.wait()


def bwrap_argv(spec: SandboxSpec, info_fd: int) -> list[str]:
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--info-fd", str(info_fd)]
    argv += ["--uid", INSIDE_ID, "--gid", INSIDE_ID, "--hostname", "sandbox"]
    if spec.network:
        argv.append("--share-net")
    argv += root_binds(Path(spec.image) if spec.image else None, spec.workdir)
    argv += ["--dev", "/dev", "--proc", "/proc"]
    # /tmp first: a tmpfs mounted later would hide binds placed under /tmp. Bind targets must lie outside
    # the read-only host directories (their mount points cannot be created there), e.g. /env, /data.
    argv += ["--size", str(spec.max_file_mb * _MB), "--perms", "1777", "--tmpfs", "/tmp"]
    argv += ["--size", str(spec.disk_mb * _MB), "--perms", "0755", "--tmpfs", spec.workdir]
    for host_path, sandbox_path in spec.ro_binds:
        check_visible(Path(host_path), "ro_binds")
        argv += ["--ro-bind", host_path, sandbox_path]
    argv += ["--remount-ro", "/", "--chdir", spec.workdir, "--"]
    return argv


def root_binds(rootfs: Path | None, workdir: str) -> list[str]:
    """Read-only binds of a rootfs' top-level entries onto bwrap's fresh root (a tmpfs), so mount
    points such as the workspace can still be created. Without a rootfs: an allow-list of the host's."""
    if rootfs is not None:
        check_visible(rootfs, "rootfs")
        if not (rootfs / "bin" / "sh").exists():
            raise SandboxError(f"rootfs {str(rootfs)!r} has no /bin/sh")
    base = rootfs or Path("/")
    skip = _NOT_FROM_ROOTFS | {workdir.strip("/").split("/")[0]}
    names = sorted(p.name for p in base.iterdir()) if rootfs else HOST_ROOT_ENTRIES
    argv: list[str] = []
    for name in names:
        entry = base / name
        if name in skip or not (entry.exists() or entry.is_symlink()):
            continue
        if entry.is_symlink():
            argv += ["--symlink", os.readlink(entry), f"/{name}"]
        elif entry.is_dir():
            argv += ["--ro-bind", str(entry), f"/{name}"]
    return argv


def check_visible(path: Path, what: str) -> None:
    """bwrap runs as an unprivileged uid when we are root: what it binds must be reachable by others."""
    if not path.exists():
        raise SandboxError(f"{what}: {str(path)!r} does not exist on this host")
    if os.geteuid() != 0:
        return
    resolved = path.resolve()
    for directory in [*reversed(resolved.parents), resolved]:
        needed = 0o005 if directory == resolved else 0o001
        if directory.is_dir() and directory.stat().st_mode & needed != needed:
            raise SandboxError(
                f"{what}: {str(path)!r} is not reachable by the sandbox's unprivileged user "
                f"({str(directory)!r} lacks o+{'rx' if needed == 0o005 else 'x'}); use a world-readable place"
            )


def _read_info(fd: int) -> dict | None:
    """bwrap writes a JSON object (child pid, namespaces) on its info fd; EOF or silence means failure."""
    data = b""
    while wait_readable(fd, _STARTUP_TIMEOUT):
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        data += chunk
        try:
            return json.loads(data)
        except json.JSONDecodeError:
            continue
    return None


def _wait_ready(keeper: subprocess.Popen[bytes]) -> bool:
    assert keeper.stdout is not None
    ready = wait_readable(keeper.stdout, _STARTUP_TIMEOUT) and keeper.stdout.readline() == b"ready\n"
    keeper.stdout.close()
    return ready


class BwrapSandbox(SpareKeeping):
    name = "bwrap"
    session_alive = staticmethod(BwrapSession.alive)  # type: ignore[arg-type]

    def __init__(self, base_dir: str | None = None):
        self.base_dir = base_dir
        self._keep_spares()

    def _open_now(self, spec: SandboxSpec | None) -> BwrapSession:
        if _missing_tools():
            raise SandboxError(f"the bwrap backend is unavailable: {self.available()[1]}")
        if self.base_dir is not None:
            check_visible(Path(self.base_dir), "base_dir")
        return BwrapSession(spec or SandboxSpec(), self.base_dir)

    def available(self) -> tuple[bool, str]:
        missing = _missing_tools()
        if missing:
            return False, f"missing {', '.join(missing)} (apt-get install -y bubblewrap util-linux)"
        return True, "bubblewrap " + _bwrap_version()


@functools.cache
def _missing_tools() -> list[str]:
    return [tool for tool in ("bwrap", "nsenter", "prlimit") if shutil.which(tool) is None]


@functools.cache
def _bwrap_version() -> str:
    out = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout
    return out.split()[-1] if out.split() else "unknown version"
