"""Our side of the command runners (`runner.py`): start the zygote, get a runner per session, hand
it commands, collect their results.

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
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from recreate.pools import ThreadPool
from recreate.sandbox.base import Result, SandboxError
from recreate.sandbox.process import (
    KILLER_UID,
    CappedOutput,
    drain,
    exit_code_of,
    make_result,
    read_into,
    wait_readable,
)

_READY_SECONDS = 15.0
# PR_SET_PDEATHSIG fires when the *thread* that started a process exits, and callers open sessions
# from short-lived worker threads; so the zygote (and bwrap keepers) are started from this one thread.
SPAWNER = ThreadPool(1, "recreate-sandbox-spawner")
Killer = Callable[[int | None], None]


def send_message(sock: socket.socket, fields: list[str], fds: list[int]) -> None:
    """One message of runner.py's protocol: NUL-separated `fields`, with `fds` attached."""
    if any("\0" in field for field in fields):
        raise SandboxError("a command or environment value contains a NUL byte")
    try:  # as subprocess would: surrogate escapes (bytes that are not UTF-8) go as those bytes
        body = os.fsencode("\0".join(fields))
    except UnicodeEncodeError as exc:
        raise SandboxError(f"a command or environment value is not valid text: {exc}") from None
    message = len(body).to_bytes(4, sys.byteorder) + body
    sent = socket.send_fds(sock, [message], fds)
    if sent < len(message):  # not an empty sendall: it fails when the runner is gone, and a runner the
        sock.sendall(message[sent:])  # command just killed must not read as one that never got it


class _Zygote:
    """The process that forks runners (one per host process, restarted if it died)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.sock, theirs = socket.socketpair()
        script = str(Path(__file__).with_name("runner.py"))
        arguments = [str(theirs.fileno()), str(os.getpid()), str(KILLER_UID)]
        try:
            self.process = SPAWNER.submit(
                subprocess.Popen,
                # This very interpreter, whose path (sys.executable, maybe a venv's link) we might
                # not be allowed to walk again.
                [os.readlink("/proc/self/exe"), "-I", "-S", script, *arguments],
                executable="/proc/self/exe",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                start_new_session=True,
            ).result()
        finally:
            theirs.close()

    def alive(self) -> bool:
        return self.process.poll() is None


_RESTART_AFTER_SECONDS = 1.0  # a zygote that lived this long is restarted when it dies
_zygote: _Zygote | None = None
_zygote_lock = threading.Lock()
_watched: set[int] = set()  # session uids whose processes the zygote kills when we end
_forget_later: list[int] = []


def _after_fork_in_child() -> None:
    global _zygote, _zygote_lock, _watched, _forget_later
    _zygote, _zygote_lock = None, threading.Lock()  # the parent's zygote is not our child to poll
    _watched, _forget_later = set(), []  # nor its sessions ours to end


os.register_at_fork(after_in_child=_after_fork_in_child)


def _start_zygote() -> _Zygote:
    """A new zygote, told whom to end with us; it is restarted as soon as it dies while it watches
    anyone (hold `_zygote_lock`)."""
    zygote = _Zygote()
    for uid in list(_watched):
        send_message(zygote.sock, ["watch", str(uid)], [])
    threading.Thread(target=_restart_when_gone, args=(zygote,), daemon=True, name="recreate-zygote").start()
    return zygote


def _restart_when_gone(zygote: _Zygote) -> None:
    global _zygote
    zygote.process.wait()
    if time.monotonic() - zygote.started < _RESTART_AFTER_SECONDS:
        return  # it could not start: so would the next (the next session message tries, and says why)
    with _zygote_lock:
        if _zygote is zygote and _watched:  # killed by someone: until restarted, nothing would reap
            with contextlib.suppress(OSError):
                _zygote = _start_zygote()


def _send_to_zygote(fields: list[str], fds: list[int]) -> None:
    """Send one message, starting the zygote first if it is not running (hold `_zygote_lock`)."""
    global _zygote
    for attempt in (1, 2):
        try:
            if _zygote is None or not _zygote.alive():
                _zygote = _start_zygote()
            while _forget_later:
                send_message(_zygote.sock, ["forget", str(_forget_later.pop())], [])
            send_message(_zygote.sock, fields, fds)
            return
        except OSError:
            if _zygote is not None:
                _zygote.process.kill()
                _zygote.process.wait()
                _zygote = None
            if attempt == 2:
                raise


def _fork_runner(fields: list[str], session_end: socket.socket) -> None:
    with _zygote_lock:
        _send_to_zygote(fields, [session_end.fileno()])


def watch_uid(uid: int) -> None:
    """Have the zygote kill every process of session uid `uid` if this process ends before
    `forget_uid(uid)`, however it ends (SIGKILL included). It catches what nothing of ours could: a
    sandbox whose start was cut by our death (bwrap's child, waiting for its killed parent's go-ahead,
    would wait forever)."""
    with _zygote_lock:
        _watched.add(uid)
        _send_to_zygote(["watch", str(uid)], [])


def forget_uid(uid: int) -> None:
    """The session of `uid` has ended: its uid may go to another owner's session. Never waits for the
    lock: a session closed by the garbage collector may be closed inside it, on the thread holding it;
    then the zygote hears of it with the next message."""
    _watched.discard(uid)
    if not _zygote_lock.acquire(blocking=False):
        _forget_later.append(uid)
        return
    try:
        if _zygote is not None and _zygote.alive():
            with contextlib.suppress(OSError):  # a zygote that died forgets anyway
                send_message(_zygote.sock, ["forget", str(uid)], [])
    finally:
        _zygote_lock.release()


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
            _fork_runner(fields, theirs)
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
