"""Our side of the command runners (`runner.py`): get a runner per session from the zygote
(`zygote.py`), hand it commands, collect their results.

Per command: three fresh pipes (stdout, stderr, status) go to the runner with the request; we read
the pipes until the status pipe says the command exited, or until the deadline, when the caller's
`kill` gets the command's pid (None if it never started) and must leave nothing of it running.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from recreate.sandbox.base import Result, SandboxError
from recreate.sandbox.process import (
    CappedOutput,
    drain,
    exit_code_of,
    make_result,
    read_into,
    wait_readable,
)
from recreate.sandbox.zygote import fork_runner, send_message

_READY_SECONDS = 15.0
Killer = Callable[[int | None], None]


class RunnerGone(SandboxError):
    """The runner had died before the command was sent: nothing ran."""


def _read_pid(fd: int) -> int | None:
    """The command's pid, if the runner has sent it."""
    os.set_blocking(fd, False)
    with contextlib.suppress(OSError, ValueError):
        return int(os.read(fd, 32))
    return None


class CommandRunner:
    """The runner of one session; usable from several threads at once.

    `target`: pid whose namespaces and root to join (bwrap), else 0 and `cwd` is the working
    directory; `uid`/`gid` to run as (-1: ours); `cgroup_procs`: the session cgroup to enter;
    `limits`: rlimits (resource.RLIMIT_* name, value) for the runner and every command."""

    def __init__(
        self, *, target: int = 0, uid: int | None = None, gid: int | None = None, cwd: str = "/",
        cgroup_procs: Path | None = None, limits: list[tuple[str, int]],
    ) -> None:  # fmt: skip
        self.broken = False
        self._lock = threading.Lock()  # one message at a time on the socket
        self._ready_lock = threading.Lock()
        self._pid, self._pidfd = 0, -1  # known once it has answered
        self.sock, theirs = socket.socketpair()
        try:
            fields = [str(target), str(-1 if uid is None else uid), str(-1 if gid is None else gid), cwd]
            fields += [str(cgroup_procs or ""), *(f"{name}={value}" for name, value in limits)]
            fork_runner(fields, theirs)
        except BaseException:
            self.sock.close()
            raise
        finally:
            theirs.close()

    @property
    def pid(self) -> int:
        """The runner's host pid. The runner starts while the caller goes on: this waits for it."""
        with self._ready_lock:
            if self._pidfd < 0 and not self.broken:
                self._await_ready()
            return self._pid

    def _await_ready(self) -> None:
        reply = self.sock.recv(4096) if wait_readable(self.sock, _READY_SECONDS) else b""
        if not reply.startswith(b"ready "):
            self.broken = True
            reason = reply.decode(errors="replace").lstrip("!").strip() or "no answer"
            raise SandboxError(f"the sandbox's command runner failed to start: {reason}")
        self._pid = int(reply.split()[1])
        self._pidfd = os.pidfd_open(self._pid)  # signals reach this runner, never a reused pid

    def run(
        self, argv: list[str], env: dict[str, str], timeout: float, output_limit: int, kill: Killer
    ) -> Result:
        """Run `argv` (argv[0] an absolute path) with exactly `env`."""
        started = time.perf_counter()
        if self.pid <= 0:
            raise RunnerGone("the sandbox's command runner is gone")
        fields = [str(len(argv)), *argv, *(f"{name}={value}" for name, value in env.items())]
        pipes = [os.pipe() for _ in range(4)]  # stdout, stderr, status, pid
        try:
            self._send(fields, [write for _, write in pipes])
        except BaseException:
            for read, _ in pipes:
                os.close(read)
            raise
        finally:
            for _, write in pipes:
                os.close(write)
        return self._collect(*(read for read, _ in pipes), started, timeout, output_limit, kill)

    def _send(self, fields: list[str], fds: list[int]) -> None:
        with self._lock:
            if self.broken:
                raise RunnerGone("the sandbox's command runner is gone")
            try:
                send_message(self.sock, fields, fds)
            except OSError as exc:
                self.broken = True
                raise RunnerGone(f"the sandbox's command runner is gone: {exc}") from exc

    def _collect(
        self, out_r: int, err_r: int, status_r: int, pid_r: int, started: float, timeout: float,
        output_limit: int, kill: Killer,
    ) -> Result:  # fmt: skip
        outputs = {out_r: CappedOutput(output_limit), err_r: CappedOutput(output_limit)}
        status, timed_out, lost = b"", False, False
        try:
            with selectors.DefaultSelector() as selector:
                for fd in (out_r, err_r, status_r):
                    selector.register(fd, selectors.EVENT_READ)
                deadline = started + timeout
                while not lost and not status.endswith(b"\n"):
                    remaining = deadline - time.perf_counter()
                    if remaining <= 0:
                        timed_out = True
                        break
                    for key, _ in selector.select(remaining):
                        if key.fd != status_r:
                            if not read_into(key.fd, outputs[key.fd]):
                                selector.unregister(key.fd)
                        elif chunk := os.read(status_r, 64):
                            status += chunk
                        else:
                            lost = True
                            break
            pid = _read_pid(pid_r)
            if timed_out:
                kill(pid)
                self._signal(signal.SIGCONT)  # a command may have stopped its runner
            drain(outputs)
        finally:
            for fd in (out_r, err_r, status_r, pid_r):
                os.close(fd)
        if status.startswith(b"!"):
            raise SandboxError(f"could not start the command: {status[1:].decode(errors='replace').strip()}")
        out, err = outputs.values()
        if lost:
            # The runner died while the command ran (a command can kill it: they share a uid); the
            # command's status is unknown. The session starts a new runner for its next command.
            self.broken = True
            err.feed(b"\n[the sandbox's command runner was killed: exit status unknown]\n")
            return make_result(out, err, None, started, False)
        code = None if timed_out else exit_code_of(int(status))
        return make_result(out, err, code, started, timed_out)

    def _signal(self, number: int) -> None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self._pidfd, number)

    def close(self) -> None:
        """Kill the runner (its session kills the commands still running) and wait until it is gone."""
        with self._ready_lock:
            if self._pidfd < 0 and not self.broken:
                with contextlib.suppress(SandboxError, OSError):
                    self._await_ready()  # one still starting: wait for its pid
            self.broken = True
            self.sock.close()
            if self._pidfd < 0:
                return
            self._signal(signal.SIGKILL)
            wait_readable(self._pidfd, _READY_SECONDS)  # readable once it has exited
            os.close(self._pidfd)
            self._pidfd = -1
