"""Our side of the zygote (`runner.py`'s `main`): the root helper process, one per host process, that
forks a command runner per session and, when the host process ends however it ends, kills every
process of the session uids it was told to watch and not yet told to forget.

It is started on the first message, restarted by the next message if it died, and at once by a
watcher thread if it died after living `RESTART_AFTER_SECONDS` while it watched anyone (killed by
someone: until restarted, nothing would reap). A zygote that died sooner could not start and would
again: the next message tries, and says why.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from recreate.pools import ThreadPool
from recreate.sandbox.base import SandboxError
from recreate.sandbox.process import KILLER_UID, wait_readable

# PR_SET_PDEATHSIG fires when the *thread* that started a process exits, and callers open sessions
# from short-lived worker threads; so the zygote (and bwrap keepers) are started from this one thread.
SPAWNER = ThreadPool(1, "recreate-sandbox-spawner")
RESTART_AFTER_SECONDS = 1.0


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


class Zygote:
    """One zygote process. Its pidfd, not Popen's poll (which answers "running" while another thread
    waits for the process), says whether it runs, and carries our signals to it and no reused pid."""

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
        except BaseException:
            self.sock.close()
            raise
        finally:
            theirs.close()
        self.pidfd = os.pidfd_open(self.process.pid)  # nothing reaps it before this: only the watcher

    def alive(self) -> bool:
        return not wait_readable(self.pidfd, 0)

    def kill(self) -> None:
        """SIGKILL: it dies without ending the watched sessions' processes (it runs nothing more)."""
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def close(self) -> None:
        self.sock.close()
        os.close(self.pidfd)


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()
_watched: set[int] = set()  # session uids whose processes the zygote kills when we end
_forget_later: list[int] = []  # forgotten while another thread held the lock: sent by whoever holds it


def _after_fork_in_child() -> None:
    global _zygote, _zygote_lock, _watched, _forget_later
    if _zygote is not None:  # the parent's: not our child to watch, nor its sessions ours to end
        with contextlib.suppress(OSError):
            _zygote.close()
    _zygote, _zygote_lock = None, threading.Lock()
    _watched, _forget_later = set(), []


os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def _holding_lock() -> Iterator[None]:
    """The zygote lock; every holder sends the forgets queued while it held it, before and after it
    lets go (a forget queued between the two is sent by the forgetter or by the next holder)."""
    with _zygote_lock:
        try:
            yield
        finally:
            _send_forgets()
    while _forget_later and _zygote_lock.acquire(blocking=False):
        try:
            _send_forgets()
        finally:
            _zygote_lock.release()


def _send_forgets() -> None:
    """(hold the lock) A zygote not running is told no forget: a new one learns only `_watched`."""
    while _forget_later:
        uid = _forget_later.pop()
        if _zygote is not None and _zygote.alive():
            with contextlib.suppress(OSError):  # one that just died forgets anyway
                send_message(_zygote.sock, ["forget", str(uid)], [])


def _start() -> Zygote:
    """(hold the lock) A new zygote, watched from its own thread, told whom to end with us."""
    zygote = Zygote()
    try:
        threading.Thread(
            target=_restart_when_gone, args=(zygote,), daemon=True, name="recreate-zygote"
        ).start()
        for uid in list(_watched):
            send_message(zygote.sock, ["watch", str(uid)], [])
    except BaseException:
        zygote.kill()  # unreferenced, it would read the end of its socket and end every watched session
        raise
    return zygote


def _restart_when_gone(zygote: Zygote) -> None:
    global _zygote
    while not wait_readable(zygote.pidfd, 3600):
        pass
    zygote.process.wait()  # reaped here, and only here
    with _holding_lock():
        if _zygote is zygote:
            _zygote = None
            lived = time.monotonic() - zygote.started
            if _watched and lived >= RESTART_AFTER_SECONDS:
                with contextlib.suppress(Exception):  # (a thread limit, interpreter shutdown)
                    _zygote = _start()
        zygote.close()


def _send(fields: list[str], fds: list[int]) -> None:
    """(hold the lock) Send one message, starting the zygote first if none runs."""
    global _zygote
    for attempt in (1, 2):
        try:
            if _zygote is None or not _zygote.alive():
                _zygote = _start()
            send_message(_zygote.sock, fields, fds)
            return
        except OSError:
            if _zygote is not None:
                _zygote.kill()  # its watcher closes it
                _zygote = None
            if attempt == 2:
                raise


def fork_runner(fields: list[str], session_end: socket.socket) -> None:
    """Have the zygote fork a runner for a session (runner.py's `_runner` reads `fields`)."""
    with _holding_lock():
        _send(fields, [session_end.fileno()])


def watch_uid(uid: int) -> None:
    """Have the zygote kill every process of session uid `uid` if this process ends before
    `forget_uid(uid)`, however it ends (SIGKILL included). It catches what nothing of ours could: a
    sandbox whose start was cut by our death (bwrap's child, waiting for its killed parent's go-ahead,
    would wait forever)."""
    with _holding_lock():
        _watched.add(uid)
        _send(["watch", str(uid)], [])


def forget_uid(uid: int) -> None:
    """The session of `uid` has ended: its uid may go to another owner's session. Never waits for the
    lock: a session closed by the garbage collector may be closed inside it, on the thread holding it,
    which then sends the forget."""
    _watched.discard(uid)
    _forget_later.append(uid)
    if _zygote_lock.acquire(blocking=False):
        try:
            _send_forgets()
        finally:
            _zygote_lock.release()
