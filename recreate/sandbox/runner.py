"""Command runners for `local` and `bwrap` sessions: one long-lived process per session that starts
each command with a single vfork+exec of /bin/sh (posix_spawn), so a command costs about what a bare
`sh -c true` costs instead of a chain of wrapper execs (cgroup entry, setpriv, prlimit, nsenter).

This file runs as its own program (`python -I -S runner.py`: stdlib only, nothing from this package), once
per host process: the *zygote*. It stays as we started it (root, or us) and forks one runner per
session on request; a fork is cheaper than starting an interpreter. The new runner enters the
session's cgroup, sets its rlimits (inherited by every command), then (bwrap) joins the sandbox's
namespaces and root like `nsenter --all --root --wd`, or (local) its working directory, drops to the
session's uid/gid and serves commands on the socket it was given.

    message:  u32 length, then NUL-separated fields; descriptors ride along (SCM_RIGHTS)
    zygote:   fields: target pid (0: none), uid, gid (-1: keep ours), cwd, cgroup.procs path (""),
              then rlimits "NAME=value"; one descriptor: the session's socket. The runner answers
              on it "ready <pid>\n" or "!<error>\n".
    runner:   fields: argv count, argv..., env items "K=V"...; descriptors: the command's stdout,
              stderr, a status pipe and a pid pipe. It writes the command's (host) pid to the pid
              pipe once spawned, and "<exit code>\n" (-N: signal N) to the status pipe once it
              exited, or "!<error>\n" if it could not start; then closes both. (The pid has a pipe of
              its own so that the host, waiting on the status pipe, need not wake up for it.)

Commands get a new session (setsid), default SIGPIPE/SIGXFSZ dispositions and no descriptor but
their stdin/stdout/stderr (what a request carries is received close-on-exec). Runners are not
dumpable (commands of the same uid cannot read their memory or descriptors); each dies with the
zygote. The zygote ends when its host process does (a pidfd says so; a stray signal to one of its
threads does not count) or its socket closes, and first kills every process of the session uids it
was told to watch and not told to forget: sessions whose host process died without closing them, also
those it was still starting.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4
_NAMESPACES = {  # name under /proc/PID/ns -> CLONE_NEW* flag; the user namespace is joined separately
    "cgroup": 0x02000000,
    "ipc": 0x08000000,
    "uts": 0x04000000,
    "net": 0x40000000,
    "pid": 0x20000000,
    "mnt": 0x00020000,
}
_CLONE_NEWUSER = 0x10000000
_HEADER = struct.Struct("=I")
_MAX_FDS = 4
_LIBC = ctypes.CDLL(None, use_errno=True)


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One request: its body and the descriptors that came with it. EOFError when the host is gone."""
    # Not socket.recv_fds: before Python 3.12 it drops its flags, and the descriptors would be
    # inherited by every command (which could then write its own exit status or steal requests).
    fds = array.array("i")
    space = socket.CMSG_SPACE(_MAX_FDS * fds.itemsize)
    head, ancillary, _, _ = sock.recvmsg(_HEADER.size, space, socket.MSG_CMSG_CLOEXEC)
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if not head:
        raise EOFError
    head += _receive_exactly(sock, _HEADER.size - len(head))
    return _receive_exactly(sock, _HEADER.unpack(head)[0]), list(fds)


def _enter(target: int, uid: int, gid: int) -> None:
    """Join the namespaces, root and working directory of process `target`, then become uid/gid."""
    fds = {name: os.open(f"/proc/{target}/ns/{name}", os.O_RDONLY) for name in [*_NAMESPACES, "user"]}
    root = os.open(f"/proc/{target}/root", os.O_RDONLY)
    cwd = os.open(f"/proc/{target}/cwd", os.O_RDONLY)
    shared_user = os.readlink("/proc/self/ns/user") == os.readlink(f"/proc/{target}/ns/user")
    # As root we may join the others first and the user namespace last (as nsenter does); unprivileged,
    # joining the user namespace is what grants the rights to join the others.
    order = [*_NAMESPACES, "user"] if os.geteuid() == 0 else ["user", *_NAMESPACES]
    for name in order:
        if name == "user" and shared_user:  # bwrap run as root may leave us in the same one
            continue
        if _LIBC.setns(fds[name], _NAMESPACES.get(name, _CLONE_NEWUSER)) != 0:
            raise OSError(ctypes.get_errno(), f"setns {name}: {os.strerror(ctypes.get_errno())}")
        os.close(fds[name])
    os.fchdir(root)
    os.chroot(".")
    os.fchdir(cwd)
    os.close(root)
    os.close(cwd)
    _become(uid, gid)


def _become(uid: int, gid: int) -> None:
    with contextlib.suppress(PermissionError):  # a user namespace with setgroups denied: none to drop
        os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def _spawn(body: bytes, fds: list[int], devnull: int) -> int:
    fields = body.split(b"\0")
    count = int(fields[0])
    argv, env = fields[1 : 1 + count], fields[1 + count :]
    actions = [(os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, fds[0], 1)]
    actions.append((os.POSIX_SPAWN_DUP2, fds[1], 2))
    environ = dict(item.split(b"=", 1) for item in env)
    return os.posix_spawn(
        argv[0],
        argv,
        environ,
        file_actions=actions,
        setsid=True,
        setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
    )


def _report(fd: int, line: str) -> None:
    with contextlib.suppress(OSError):  # the host gave up on this command (its deadline passed)
        os.write(fd, line.encode())


def serve(sock: socket.socket) -> None:
    devnull = os.open("/dev/null", os.O_RDONLY)
    running: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, status pipe)
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    while True:
        for fd, _ in poller.poll():
            if fd != sock.fileno():
                pid, status = running.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                _report(status, f"{os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}\n")
                os.close(status)
                continue
            try:
                body, fds = receive(sock)
            except (EOFError, ConnectionError):
                return
            try:
                pid = _spawn(body, fds, devnull)
            except (OSError, ValueError) as exc:
                _report(fds[2], f"!{exc}\n")
                for each in fds:
                    os.close(each)
                continue
            _report(fds[3], f"{pid}\n")
            pidfd = os.pidfd_open(pid)
            running[pidfd] = (pid, fds[2])
            poller.register(pidfd, select.POLLIN)
            for each in (fds[0], fds[1], fds[3]):
                os.close(each)


def _die_with_parent() -> None:
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _runner(fields: list[bytes], sock: socket.socket, zygote: int) -> None:
    """Become the runner a zygote request describes (see the module's docstring), then serve."""
    target, uid, gid = (int(field) for field in fields[:3])
    cwd, cgroup = (os.fsdecode(field) for field in fields[3:5])
    if cgroup:
        with open(cgroup, "w") as procs:
            procs.write("0")
    for item in fields[5:]:
        name, value = item.decode().split("=")
        resource.setrlimit(getattr(resource, name), (int(value), int(value)))
    if target:
        _enter(target, uid, gid)
    else:
        os.chdir(cwd)
        if uid >= 0:
            _become(uid, gid)
    _LIBC.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    _die_with_parent()  # (after the uid switch, which would clear it)
    if os.getppid() != zygote:
        return
    sock.sendall(f"ready {os.getpid()}\n".encode())
    serve(sock)


def main() -> None:
    """The zygote. argv: its control socket's fd, its host process's pid, the uid killers act from."""
    zygote = socket.socket(fileno=int(sys.argv[1]))
    host, killer_uid = int(sys.argv[2]), int(sys.argv[3])
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps runners that exit
    watched: set[int] = set()
    try:  # ProcessLookupError: our host ended before we began; what it sent is still queued
        with contextlib.suppress(ProcessLookupError, EOFError, ConnectionError):
            host_fd = _host_pidfd(host)
            poller = select.poll()
            for fd in (zygote.fileno(), host_fd):
                poller.register(fd, select.POLLIN)
            while host_fd not in {fd for fd, _ in poller.poll()}:  # readable: the whole process ended
                body, fds = receive(zygote)
                if not _watch(body, watched):
                    _start_runner(zygote, body, fds)
                for fd in fds:
                    os.close(fd)
    finally:
        _end_watched(zygote, watched, killer_uid)


def _host_pidfd(host: int) -> int:
    """A pidfd of our host process; ProcessLookupError if it is gone already (we were reparented)."""
    fd = os.pidfd_open(host)  # (if `host` had died, its pid could be another process's by now:)
    if os.getppid() != host:
        raise ProcessLookupError(host)
    return fd


def _start_runner(zygote: socket.socket, body: bytes, fds: list[int]) -> None:
    me = os.getpid()
    try:
        pid = os.fork()
    except OSError as exc:  # e.g. a process limit: the session says so, we go on
        _report(fds[0], f"!cannot start a command runner: {exc}\n")
        return
    if pid == 0:
        code = 0
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            zygote.close()
            sock = socket.socket(fileno=fds[0])
            try:
                _runner(body.split(b"\0"), sock, me)
            except Exception as exc:  # reported to the session, which raises it
                sock.sendall(f"!{type(exc).__name__}: {exc}\n".encode())
                code = 1
        finally:
            os._exit(code)


def _watch(body: bytes, watched: set[int]) -> bool:
    """Apply a "watch"/"forget" message; False if `body` is something else (a runner request)."""
    what, _, uid = body.partition(b"\0")
    if what == b"watch":
        watched.add(int(uid))
    elif what == b"forget":
        watched.discard(int(uid))
    return what in (b"watch", b"forget")


def _end_watched(zygote: socket.socket, watched: set[int], killer_uid: int) -> None:
    """Our host process ended: kill every process of the sessions it had not closed (what it sent
    before it ended is still queued on the socket, so read that first)."""
    zygote.setblocking(False)
    with contextlib.suppress(EOFError, OSError):
        while True:
            body, fds = receive(zygote)
            _watch(body, watched)
            for fd in fds:
                os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for _ in range(3):  # one pass reaches them all; twice more for what raced with it
        for uid in watched:
            kill_every_process_of(uid, killer_uid)
        time.sleep(0.02)


def kill_every_process_of(uid: int, killer_uid: int) -> None:
    """kill(-1, SIGKILL) sent as `uid` reaches exactly its processes, in one pass the kernel does not
    let a fork bomb outrun. A forked child sends it with `uid` as its effective uid only: its real and
    saved uid are `killer_uid` (which nothing runs as), so the processes it kills cannot signal it (a
    SIGSTOP from them had stopped the killer and hung our wait for it). Needs root."""
    killer = os.fork()
    if killer == 0:
        try:
            os.setgroups([])
            os.setresgid(killer_uid, uid, killer_uid)
            os.setresuid(killer_uid, uid, killer_uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(killer, 0)


if __name__ == "__main__":
    main()
