"""Session-wide memory limits: one memory cgroup per sandbox session.

RLIMIT_AS caps each process on its own (four processes held 502 MB under a 200 MB limit); a cgroup
caps what all of a session's processes hold together, files they write to a tmpfs included. A session
cgroup is made under the cgroup this process runs in:
- cgroup v2, when the memory controller is enabled for our cgroup's children (root, or a delegated
  cgroup);
- else cgroup v1's memory hierarchy (the "hybrid" layout), when we may create cgroups there (root).
`RECREATE_CGROUP` names another parent, e.g. a cgroup delegated to this user with
`systemd-run --user --scope -p Delegate=yes`. Where neither works, sessions keep per-process limits
and the first open says so. `recreate doctor` reports which applies.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import signal
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from recreate.sandbox.process import start_ticks

ENV_PARENT = "RECREATE_CGROUP"
_PREFIX = "recreate-"
_MB = 1024 * 1024
_REMOVE_WAIT_S = 5.0
# Moves the shell into the cgroup (0 = the writing process) and then becomes the command: every
# process the command starts is born inside.
_ENTER = 'echo 0 >"$0" && exec "$@"'


class SessionLimitWarning(UserWarning):
    """A session's memory limit holds per process only (no cgroup available here)."""


@dataclass(frozen=True)
class MemoryLimitSupport:
    version: int  # 2 or 1; 0 when session cgroups cannot be made here
    parent: Path | None
    detail: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.parent is not None


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, super options) of the cgroup filesystems."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split(" - ")
            if len(fields) != 2:
                continue
            mount_point = fields[0].split()[4]
            fstype, _, options = (fields[1].split() + ["", "", ""])[:3]
            if fstype in ("cgroup", "cgroup2"):
                found.append((mount_point, fstype, set(options.split(","))))
    return found


def _own_cgroups() -> dict[str, str]:
    """Our cgroup path per hierarchy: '' for v2, else each v1 controller name."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


def _can_create_children(parent: Path) -> bool:
    probe = parent / f"{_PREFIX}probe-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        probe.mkdir()
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.rmdir()
    return True


def _v2_parent(parent: Path) -> bool:
    """Can children of `parent` get a memory limit? Enables the controller for them if it may."""
    subtree = parent / "cgroup.subtree_control"
    try:
        if "memory" not in subtree.read_text().split():
            subtree.write_text("+memory")  # EBUSY when processes live in `parent` itself
    except OSError:
        return False
    return _can_create_children(parent)


def _detect() -> MemoryLimitSupport:
    named = os.environ.get(ENV_PARENT)
    if named:
        parent = Path(named)
        if (parent / "cgroup.controllers").exists() and _v2_parent(parent):
            return MemoryLimitSupport(2, parent, f"cgroup v2 under {parent} (from ${ENV_PARENT})")
        if (parent / "memory.limit_in_bytes").exists() and _can_create_children(parent):
            return MemoryLimitSupport(1, parent, f"cgroup v1 memory under {parent} (from ${ENV_PARENT})")
        return MemoryLimitSupport(
            0,
            None,
            f"${ENV_PARENT}={named} is not a memory cgroup we may create children in",
            f"point {ENV_PARENT} at a cgroup delegated to this user, or unset it",
        )
    own, mounts = _own_cgroups(), _mounts()
    for mount_point, fstype, _ in mounts:
        if fstype == "cgroup2" and "" in own:
            parent = Path(mount_point + own[""])
            if (parent / "cgroup.controllers").exists() and _v2_parent(parent):
                return MemoryLimitSupport(2, parent, f"cgroup v2 under {parent}")
    for mount_point, fstype, options in mounts:
        if fstype == "cgroup" and "memory" in options and "memory" in own:
            parent = Path(mount_point + own["memory"])
            if _can_create_children(parent):
                return MemoryLimitSupport(1, parent, f"cgroup v1 memory under {parent} (hybrid cgroups)")
    return MemoryLimitSupport(
        0,
        None,
        "no memory cgroup can be made here: memory limits hold per process (RLIMIT_AS) only",
        f"run as root, or delegate a cgroup v2 subtree and set {ENV_PARENT} to it",
    )


@functools.cache
def memory_limit_support() -> MemoryLimitSupport:
    """Where session cgroups go on this machine (probed once per process)."""
    return _detect()


class SessionCgroup:
    """A memory cgroup holding every process of one session."""

    def __init__(self, path: Path, version: int):
        self.path = path
        self.version = version

    @classmethod
    def create(cls, memory_mb: int) -> SessionCgroup | None:
        """A fresh cgroup capped at `memory_mb` (swap included); None, with a warning once per
        process, where this machine allows none."""
        support = memory_limit_support()
        if support.parent is None:
            warnings.warn(
                f"sandbox memory limits hold per process, not per session: {support.detail} ({support.fix})",
                SessionLimitWarning,
                stacklevel=4,
            )
            return None
        name = f"{_PREFIX}{os.getpid()}-{start_ticks(os.getpid())}-{secrets.token_hex(4)}"
        path = support.parent / name
        path.mkdir()
        cgroup = cls(path, support.version)
        limit = str(memory_mb * _MB)
        try:
            if support.version == 2:
                (path / "memory.max").write_text(limit)
                with contextlib.suppress(OSError):  # absent when the kernel has no swap accounting
                    (path / "memory.swap.max").write_text("0")
            else:
                (path / "memory.limit_in_bytes").write_text(limit)
                with contextlib.suppress(OSError):
                    (path / "memory.memsw.limit_in_bytes").write_text(limit)
        except BaseException:
            cgroup.remove()
            raise
        return cgroup

    def enter_argv(self) -> list[str]:
        """An argv prefix that starts the command inside this cgroup (run it before any uid switch)."""
        return ["/bin/sh", "-c", _ENTER, str(self.path / "cgroup.procs")]

    def processes(self) -> list[int]:
        with contextlib.suppress(OSError):
            return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]
        return []

    def remove(self, wait_s: float = _REMOVE_WAIT_S) -> bool:
        """Kill whatever still runs inside, then delete the cgroup. False if it is still busy after
        `wait_s` (cgroup v1 stays busy until killed processes are reaped, which a dead owner's
        orphans wait for init to do)."""
        deadline = time.monotonic() + wait_s
        while True:
            if self.version == 2 and (self.path / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    (self.path / "cgroup.kill").write_text("1")
            else:
                for pid in self.processes():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.02)


def remove_cgroup(path: str) -> bool:
    """Remove a session cgroup recorded by a process that has died (`path` as it recorded it);
    False while it is still busy."""
    target = Path(path)
    if target.name.startswith(_PREFIX) and target.is_dir():
        return SessionCgroup(target, 2 if (target / "cgroup.controllers").exists() else 1).remove()
    return True
