"""Host-side process plumbing shared by the backends: capped output capture, process trees and how
to kill them, uids and rlimits for what a session starts."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import random
import select
import shutil
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from recreate.sandbox.base import Result, SandboxError, SandboxSpec

_MB = 1024 * 1024
_READ_SIZE = 65536
_DRAIN_SECONDS = 0.1  # after the command exits, how long to collect output still in the pipes
_SETPRIV = shutil.which("setpriv")
_PF_EXITING = 0x4  # a process flag in /proc/PID/stat
UID_BASE, UID_SPAN = 1_800_000_000, 100_000_000  # host uids given to sandboxes when we run as root
KILLER_UID = UID_BASE - 1  # no process runs as it: the uid that kills a session's processes acts from


class CappedOutput:
    """Keeps the first and last `limit // 2` bytes of a stream and counts the rest."""

    def __init__(self, limit: int):
        self.head_limit = limit - limit // 2
        self.tail_limit = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_limit:
            self.tail += data[-self.tail_limit :]
            del self.tail[: max(0, len(self.tail) - self.tail_limit)]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        if not self.truncated:
            return head + self.tail.decode("utf-8", errors="replace")
        omitted = self.total - len(self.head) - len(self.tail)
        marker = f"\n[... {omitted} bytes omitted of {self.total} ...]\n"
        return head + marker + self.tail.decode("utf-8", errors="replace")


def make_result(
    out: CappedOutput, err: CappedOutput, exit_code: int | None, started: float, timed_out: bool
) -> Result:
    return Result(
        stdout=out.text(),
        stderr=err.text(),
        exit_code=None if timed_out else exit_code,
        duration_s=time.perf_counter() - started,
        timed_out=timed_out,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        stdout_bytes=out.total,
        stderr_bytes=err.total,
    )


def exit_code_of(returncode: int) -> int:
    """Shell convention: a death by signal N reads as 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def owner_label() -> str:
    """host/pid/start-time of this process: names what our sessions leave behind, survives pid reuse."""
    return f"{socket.gethostname()}/{os.getpid()}/{start_ticks(os.getpid())}"


def owner_alive(label: str) -> bool:
    """Is the process an `owner_label` names still running? Labels from other hosts count as alive."""
    host, pid, ticks = (label.split("/") + ["", "", ""])[:3]
    if host != socket.gethostname():
        return True  # not ours to judge
    return pid.isdigit() and start_ticks(int(pid)) == ticks


def start_ticks(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def sandbox_uid() -> int | None:
    """A fresh unprivileged host uid for one session when we are root (per-uid process limits then
    count only that session); None when we already run unprivileged."""
    return UID_BASE + random.randrange(UID_SPAN) if os.geteuid() == 0 else None


def as_user(uid: int | None, *, die_with_us: bool = False) -> tuple[list[str], dict[str, Any]]:
    """How to start a child as `uid`: an argv prefix (`setpriv`) when the host has it, else Popen's own
    user/group arguments. The prefix keeps Popen on its vfork path; switching uid in Popen makes it
    fork and copy our page tables (measured: a bwrap start 14 -> 33 ms with 800 MB resident).

    `die_with_us` (with setpriv): the child gets SIGKILL when the thread that started it ends
    (PR_SET_PDEATHSIG, set after the uid switch, which would clear it), whoever still holds its pipes.
    A child whose starter died before setpriv set that signal (nothing would ever send it) sees so and
    exits: a shell after setpriv checks that its parent is still this process."""
    death = ["--pdeathsig", "KILL"] if die_with_us else []
    still_ours = ["/bin/sh", "-c", _STILL_OURS, str(os.getpid())] if die_with_us else []
    if uid is None:
        return ([_SETPRIV, *death, "--", *still_ours] if _SETPRIV and death else []), {}
    if _SETPRIV:
        return [_SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *death, "--", *still_ours], {}
    return [], {"user": uid, "group": uid, "extra_groups": []}


# $0: the starter's pid. The shell reads its parent once it has started, i.e. after setpriv's prctl: a
# parent that died before that is no longer its parent (it was reparented), one that dies after sends it
# SIGKILL, which the exec'd command inherits (execve keeps the parent-death signal of a plain binary).
_STILL_OURS = 'test "$PPID" = "$0" && exec "$@"'


@contextlib.contextmanager
def as_file_user(uid: int | None) -> Iterator[None]:
    """File access by this thread as `uid` (Linux's per-thread fsuid/fsgid; other threads keep ours).
    No-op for None. Create files where only that uid may (a tmpfs of the sandbox's user namespace)."""
    if uid is None:
        yield
        return
    libc = _libc()
    libc.setfsgid(uid)
    libc.setfsuid(uid)
    try:
        if libc.setfsuid(uid) != uid:  # returns the previous value: ours only if the switch held
            raise SandboxError(f"cannot access the workspace as uid {uid}")
        yield
    finally:
        libc.setfsuid(os.geteuid())
        libc.setfsgid(os.getegid())


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def rlimits(spec: SandboxSpec, extra_processes: int = 0) -> list[tuple[str, int]]:
    """The spec's rlimits, as (resource.RLIMIT_* name, value)."""
    return [
        ("RLIMIT_CPU", spec.cpu_seconds),
        ("RLIMIT_AS", spec.memory_mb * _MB),
        ("RLIMIT_FSIZE", spec.max_file_mb * _MB),
        ("RLIMIT_NPROC", spec.max_processes + extra_processes),
        ("RLIMIT_CORE", 0),
    ]


def limit_args(spec: SandboxSpec, extra_processes: int = 0) -> list[str]:
    """A `prlimit` prefix that sets the spec's rlimits on the command it execs (thread-safe, unlike a
    preexec_fn)."""
    options = [f"--{name[7:].lower()}={value}" for name, value in rlimits(spec, extra_processes)]
    return ["prlimit", *options, "--"]


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (parents before children), from /proc."""
    tree, index = [pid], 0
    while index < len(tree):
        task_dir = Path(f"/proc/{tree[index]}/task")
        index += 1
        with contextlib.suppress(OSError):
            for task in task_dir.iterdir():
                with contextlib.suppress(OSError):
                    tree.extend(int(child) for child in (task / "children").read_text().split())
    return tree


def kill_tree(pid: int) -> None:
    """Freeze the tree (so nothing forks away while we look), then kill every member."""
    frozen: set[int] = set()
    for _ in range(20):
        members = [p for p in process_tree(pid) if p not in frozen]
        if not members:
            break
        for member in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(member, signal.SIGSTOP)
            frozen.add(member)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for member in frozen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(member, signal.SIGKILL)


def kill_marked(needle: str) -> None:
    """SIGKILL every process whose environment contains `needle` (what left a command's process tree
    by setsid or a double fork still carries its environment), until none is left."""
    encoded = needle.encode()
    for _ in range(20):
        found = []
        for entry in os.scandir("/proc"):
            with contextlib.suppress(OSError):
                if entry.name.isdigit() and encoded in Path(entry.path, "environ").read_bytes():
                    found.append(int(entry.name))
        if not found:
            return
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def namespace_processes(pid: int) -> list[int]:
    """Live processes in the pid namespace of `pid` (its descendant namespaces excluded)."""
    namespace = os.readlink(f"/proc/{pid}/ns/pid")
    found = []
    for entry in os.scandir("/proc"):
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and os.readlink(f"{entry.path}/ns/pid") == namespace:
                found.append(int(entry.name))
    return found


def boot_ticks() -> int:
    """Now, in the unit and clock of a process's start time in /proc/PID/stat (10 ms, typically)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def birth(pid: int) -> tuple[int, int] | None:
    """When a live process started, as (start time, pid): ordered like the processes' creation, as
    pids grow within one clock tick (they wrap around only over many ticks)."""
    stat = _stat(pid)
    return (stat[1], pid) if stat is not None else None


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a live process."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            return int(fields[1]), int(fields[19])
    return None


def exiting(pid: int) -> bool:
    """Whether process `pid` is gone or on its way out: PF_EXITING is set first thing in an exit, so a
    pid namespace's init has it before the kernel kills the namespace's other processes."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return True
    return fields[0] in ("Z", "X") or bool(int(fields[6]) & _PF_EXITING)


def kill_late_orphans(
    members: Callable[[], list[int]], since: tuple[int, int], infrastructure: set[int], other_marks: str
) -> None:
    """SIGKILL each of a session's processes (`members`) born at or after `since` (see `birth`)
    unless it descends from an older process of the session (background work of an earlier
    command) or carries another command's mark (`other_marks` + its token, in its environment):
    what a timed-out command left behind after leaving its process tree and clearing its
    environment. `infrastructure` (the runner, the sandbox's init) counts as no ancestor: orphans
    are theirs."""
    for _ in range(20):  # until a pass finds nothing (what they forked meanwhile is found next pass)
        doomed = _orphans(members(), since, infrastructure, other_marks)
        if not doomed:
            return
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _orphans(
    members: list[int], since: tuple[int, int], infrastructure: set[int], other_marks: str
) -> list[int]:
    stats = {pid: stat for pid in members if (stat := _stat(pid)) is not None}
    doomed = []
    for pid, (parent, started) in stats.items():
        if (started, pid) < since or pid in infrastructure or _marked_by_another(pid, other_marks):
            continue
        ancestor, seen = parent, {pid}
        while ancestor in stats and ancestor not in infrastructure and ancestor not in seen:
            if (stats[ancestor][1], ancestor) < since:
                break  # a descendant of older background work
            seen.add(ancestor)
            ancestor = stats[ancestor][0]
        else:
            doomed.append(pid)
    return doomed


def _marked_by_another(pid: int, marks: str) -> bool:
    """Whether the environment of `pid` has a mark starting with `marks`: one the caller has already
    killed all of (its own) or one of another command (see kill_marked)."""
    with contextlib.suppress(OSError):
        return marks.encode() in Path(f"/proc/{pid}/environ").read_bytes()
    return False


def read_into(fd: int, sink: CappedOutput) -> bool:
    data = os.read(fd, _READ_SIZE)
    if data:
        sink.feed(data)
    return bool(data)


def drain(outputs: dict[int, CappedOutput]) -> None:
    stop = time.perf_counter() + _DRAIN_SECONDS
    for fd, sink in outputs.items():
        os.set_blocking(fd, False)
        with contextlib.suppress(BlockingIOError, OSError):
            while time.perf_counter() < stop and read_into(fd, sink):
                pass


def wait_readable(fd: int | IO[bytes] | socket.socket, timeout: float) -> bool:
    """True once `fd` (an fd or an object with fileno()) is readable or closed, False on timeout.
    poll, not select: select fails on descriptors numbered 1024 and up."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(max(0.0, timeout) * 1000))
