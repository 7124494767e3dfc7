"""Host-side process plumbing shared by the `local` and `bwrap` backends.

Runs one command with capped output capture, a deadline that kills the whole process tree, and
rlimits applied between fork and exec.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import random
import select
import selectors
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from recreate.sandbox.base import Result, SandboxError, SandboxSpec

_MB = 1024 * 1024
_READ_SIZE = 65536
_DRAIN_SECONDS = 0.1  # after the command exits, how long to collect output still in the pipes
_SETPRIV = shutil.which("setpriv")
UID_BASE, UID_SPAN = 1_800_000_000, 100_000_000  # host uids given to sandboxes when we run as root


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
    (PR_SET_PDEATHSIG, set after the uid switch, which would clear it), whoever still holds its pipes."""
    death = ["--pdeathsig", "KILL"] if die_with_us else []
    if uid is None:
        return ([_SETPRIV, *death, "--"] if _SETPRIV and death else []), {}
    if _SETPRIV:
        return [_SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *death, "--"], {}
    return [], {"user": uid, "group": uid, "extra_groups": []}


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


def limit_args(spec: SandboxSpec, extra_processes: int = 0) -> list[str]:
    """A `prlimit` prefix that sets the spec's rlimits on the command it execs (thread-safe, unlike a
    preexec_fn)."""
    return [
        "prlimit",
        f"--cpu={spec.cpu_seconds}",
        f"--as={spec.memory_mb * _MB}",
        f"--fsize={spec.max_file_mb * _MB}",
        f"--nproc={spec.max_processes + extra_processes}",
        "--core=0",
        "--",
    ]


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


def run_process(
    argv: list[str],
    *,
    env: dict[str, str],
    timeout: float,
    output_limit: int,
    uid: int | None = None,
    cwd: str | None = None,
    on_start: Callable[[int], None] | None = None,
    before_uid: list[str] | None = None,
) -> Result:
    """Run `argv` in a new session (as `uid` if given, after the `before_uid` argv prefix, which runs
    as us: e.g. entering a cgroup); collect capped stdout/stderr until it exits or the deadline passes.

    Background processes that keep the pipes open do not hold the call: once the command exits we
    collect what is already buffered and return.
    """
    started = time.perf_counter()
    prefix, user = as_user(uid)
    proc = subprocess.Popen(
        (before_uid or []) + prefix + argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
        **user,
    )
    assert proc.stdout is not None and proc.stderr is not None
    if on_start is not None:
        on_start(proc.pid)
    outputs = {
        proc.stdout.fileno(): CappedOutput(output_limit),
        proc.stderr.fileno(): CappedOutput(output_limit),
    }
    pidfd = os.pidfd_open(proc.pid)
    timed_out = False
    with selectors.DefaultSelector() as selector:
        for fd in outputs:
            selector.register(fd, selectors.EVENT_READ)
        selector.register(pidfd, selectors.EVENT_READ)
        deadline = started + timeout
        exited = False
        while not exited:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                timed_out = True
                kill_tree(proc.pid)
                break
            for key, _ in selector.select(remaining):
                if key.fd == pidfd:
                    exited = True
                elif not _read_into(key.fd, outputs[key.fd]):
                    selector.unregister(key.fd)
    _drain(outputs)
    os.close(pidfd)
    proc.stdout.close()
    proc.stderr.close()
    returncode = proc.wait()
    out, err = outputs.values()
    return make_result(out, err, exit_code_of(returncode), started, timed_out)


def _read_into(fd: int, sink: CappedOutput) -> bool:
    data = os.read(fd, _READ_SIZE)
    if data:
        sink.feed(data)
    return bool(data)


def _drain(outputs: dict[int, CappedOutput]) -> None:
    stop = time.perf_counter() + _DRAIN_SECONDS
    for fd, sink in outputs.items():
        os.set_blocking(fd, False)
        with contextlib.suppress(BlockingIOError, OSError):
            while time.perf_counter() < stop and _read_into(fd, sink):
                pass


def wait_readable(fd: int | IO[bytes] | socket.socket, timeout: float) -> bool:
    """True once `fd` (an fd or an object with fileno()) is readable or closed, False on timeout.
    poll, not select: select fails on descriptors numbered 1024 and up."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(max(0.0, timeout) * 1000))
