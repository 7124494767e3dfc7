"""A command channel into a docker session's container: no engine exec per command.

An engine exec costs a round of API calls plus the runtime's own exec (~170 ms with Podman). Instead
the container's main process is a small shell server, attached to our process through the engine's
attach stream: we write one line per command (a random token and the base64 of a script) to its
stdin; it runs the script as the unprivileged sandbox user and then writes an end marker carrying the
token and the exit code to stdout and a second marker to stderr. Both streams arrive multiplexed on the
same socket (8-byte frame headers), so stdout and stderr stay apart; the round trip is a few ms.

The markers must not be forgeable by the command (an evaluation's verdict may be its exit code). The
token exists only in the server's memory and on our socket, so the server runs as root inside the
container (no capabilities but SETUID/SETGID, no-new-privileges) and drops each command to uid 65534
with `setpriv` or `su`: a process of another uid cannot read the server's memory or open its
descriptors. Images without a way to drop privileges, or without `base64`, make the server report mode
`none`; the session then falls back to one engine exec per command.
"""

from __future__ import annotations

import base64
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from recreate.sandbox.base import SandboxError
from recreate.sandbox.process import CappedOutput, wait_readable

PID_FILE = "/tmp/.recreate-pid"  # the running command's pid, written by the (root) server
_SCRIPT_FILE = "/tmp/.recreate-cmd"
_DROP_SETPRIV = "setpriv --reuid=65534 --regid=65534 --clear-groups"
SERVER = rf"""
umask 022
if {_DROP_SETPRIV} id -u 2>/dev/null | grep -qx 65534; then mode=setpriv
elif su -m -s /bin/sh nobody -c 'id -u' 2>/dev/null | grep -qx 65534; then mode=su
else mode=none; fi
command -v base64 >/dev/null 2>&1 || mode=none
printf '\036ready %s\036' "$mode"
while IFS= read -r line; do
    [ "$mode" = none ] && continue
    token=${{line%% *}}
    printf '%s' "${{line#* }}" | base64 -d >{_SCRIPT_FILE}
    if [ "$mode" = setpriv ]; then
        {_DROP_SETPRIV} /bin/sh {_SCRIPT_FILE} </dev/null &
    else
        su -m -s /bin/sh nobody -c "/bin/sh {_SCRIPT_FILE}" </dev/null &
    fi
    echo $! >{PID_FILE}
    wait $!
    code=$?
    printf '\036%s %s\036' "$token" "$code"
    printf '\036%s\036' "$token" >&2
done
"""
READY_SECONDS = 15.0


class _Marked:
    """Feeds a stream into a CappedOutput up to the end marker; keeps what follows the marker."""

    def __init__(self, out: CappedOutput | None, marker: bytes):
        self.out, self.marker = out, marker
        self.pending = b""
        self.after: bytes | None = None  # bytes after the marker, once it was seen

    def feed(self, data: bytes) -> None:
        if self.after is not None:
            self.after += data
            return
        self.pending += data
        at = self.pending.find(self.marker)
        if at >= 0:
            self._emit(self.pending[:at])
            self.after, self.pending = self.pending[at + len(self.marker) :], b""
            return
        cut = len(self.pending) - (len(self.marker) - 1)  # keep what may be a marker's first part
        if cut > 0:
            self._emit(self.pending[:cut])
            self.pending = self.pending[cut:]

    def _emit(self, data: bytes) -> None:
        if self.out is not None and data:
            self.out.feed(data)


class CommandChannel:
    """The attach socket of one container running `SERVER`. One command at a time."""

    def __init__(self, sock: socket.socket, early: bytes = b""):
        self.sock = sock
        self.mode = "none"
        self.broken = False
        self._frames = early  # a partial frame carried over between reads (first: what came early)
        self._current: tuple[_Marked, _Marked] | None = None  # the running command's two streams
        self._lock = threading.Lock()

    def wait_ready(self, timeout: float = READY_SECONDS) -> str:
        """Read the server's greeting; returns its mode (`setpriv`, `su` or `none`)."""
        ready = _Marked(None, b"\036ready ")
        sinks = {1: ready, 2: _Marked(None, b"\036")}
        done = self._read(sinks, time.perf_counter() + timeout, lambda: _field(ready) is not None)
        mode = _field(ready) if done == "done" else None
        self.mode = mode.decode() if mode in (b"setpriv", b"su") else "none"
        return self.mode

    @property
    def usable(self) -> bool:
        return self.mode != "none" and not self.broken

    def idle_alive(self) -> bool:
        """Between commands the server sends nothing: a readable socket then means the container went
        away (EOF or reset), or wrote what no command asked for; either way the session is not fresh."""
        return not self.broken and not wait_readable(self.sock, 0)

    def run(
        self, script: str, out: CappedOutput, err: CappedOutput, deadline: float
    ) -> tuple[int | None, bool]:
        """Run `script` (sh) in the container: (exit code, finished before the deadline). After a
        timeout the caller kills the command and calls `finish` to collect the server's markers."""
        with self._lock:
            if self.broken:
                raise SandboxError("the command channel of this session was lost")
            token = uuid.uuid4().hex.encode()
            self._current = (_Marked(out, b"\036" + token + b" "), _Marked(err, b"\036" + token + b"\036"))
            line = token + b" " + base64.b64encode(script.encode()) + b"\n"
            try:
                self.sock.sendall(line)
            except OSError as exc:
                self.broken = True
                raise SandboxError(f"the container of this session is not usable any more: {exc}") from exc
            return self._collect(deadline)

    def finish(self, seconds: float) -> int | None:
        """After a kill: wait up to `seconds` for the end markers; the channel is lost if none come."""
        with self._lock:
            code, finished = self._collect(time.perf_counter() + seconds)
            if not finished:
                self.broken = True
            return code

    def _collect(self, deadline: float) -> tuple[int | None, bool]:
        assert self._current is not None, "no command was sent"
        stdout, stderr = self._current
        state = self._read({1: stdout, 2: stderr}, deadline, lambda: _done(stdout, stderr))
        if state == "eof":
            self.broken = True
            raise SandboxError("the container of this session stopped (its command server exited)")
        if state == "timeout":
            return None, False
        code = _field(stdout)
        return int(code) if code is not None and code.isdigit() else None, True

    def _read(self, sinks: dict[int, _Marked], deadline: float, complete: Callable[[], bool]) -> str:
        """Demultiplex frames into `sinks` until `complete()` ("done"), EOF ("eof") or the deadline."""
        while True:
            while len(self._frames) >= 8:
                stream_id, length = struct.unpack(">BxxxL", self._frames[:8])
                if len(self._frames) < 8 + length:
                    break
                if stream_id in sinks:
                    sinks[stream_id].feed(self._frames[8 : 8 + length])
                self._frames = self._frames[8 + length :]
            if complete():
                return "done"
            remaining = deadline - time.perf_counter()
            if remaining <= 0 or not wait_readable(self.sock, remaining):
                return "timeout"
            try:
                chunk = self.sock.recv(65536)
            except OSError:  # reset: the container went away with our last line unread
                return "eof"
            if not chunk:
                return "eof"
            self._frames += chunk


def _field(stream: _Marked) -> bytes | None:
    """The text between the marker and the closing \\036, once complete."""
    if stream.after is None or b"\036" not in stream.after:
        return None
    return stream.after.split(b"\036", 1)[0]


def _done(stdout: _Marked, stderr: _Marked) -> bool:
    return _field(stdout) is not None and stderr.after is not None


def read_frames(
    raw: socket.socket, sinks: dict[int, CappedOutput], deadline: float, pending: bytes = b""
) -> bool:
    """Demultiplex the exec stream (8-byte headers: stream id, 3 zero bytes, big-endian length) into
    `sinks` until it ends (True) or the deadline passes (False); `pending`: bytes already read."""
    while True:
        pending = _feed_frames(pending, sinks)
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            return False
        if not wait_readable(raw, remaining):
            return False
        chunk = raw.recv(65536)
        if not chunk:
            return True
        pending += chunk


def _feed_frames(pending: bytes, sinks: dict[int, CappedOutput]) -> bytes:
    """Feed the complete frames of `pending` to `sinks`; returns the partial frame left."""
    while len(pending) >= 8:
        stream_id, length = struct.unpack(">BxxxL", pending[:8])
        if len(pending) < 8 + length:
            break
        if stream_id in sinks:
            sinks[stream_id].feed(pending[8 : 8 + length])
        pending = pending[8 + length :]
    return pending


def stream_socket(stream: Any) -> tuple[socket.socket, bytes]:
    """The socket under a hijacked engine stream, and the bytes the HTTP client already read past the
    response's headers into its buffer (a short command's whole output can arrive in the same read as
    the headers: reading only the socket lost it, ~2% of commands on a loaded machine)."""
    sock = getattr(stream, "_sock", stream)
    response = getattr(stream, "_response", None)  # docker-py keeps the response on the stream
    buffered = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    if buffered is None or not hasattr(buffered, "peek"):
        return sock, b""
    timeout = sock.gettimeout()
    sock.setblocking(False)  # peek reads the socket only when the buffer is empty: never wait for it
    try:
        early = buffered.peek()
        buffered.read(len(early))  # taken from the buffer alone (it holds them all)
    except (BlockingIOError, OSError, ValueError):
        early = b""
    finally:
        sock.settimeout(timeout)
    return sock, early or b""
