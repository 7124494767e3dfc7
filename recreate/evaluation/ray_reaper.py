"""The local Ray's processes live as long as the driver, and end with it however it ends.

Ray ties its head processes to the *thread* that started them (Linux's PR_SET_PDEATHSIG follows the
thread), and rollouts connect from a pool thread that ends with its batch: `on_lasting_thread` starts
them from a thread that lasts as long as this process.

Ray ties its head processes (gcs_server, raylet, ...) to the driver that started them, but not all of
what they start: after a SIGKILL of the driver, ray::DashboardAgent and ray::RuntimeEnvAgent stay (Ray
2.60: they log "Raylet is dead! Exiting" and go on, one still listening on 127.0.0.1), and so may what a
worker started. `reaped_with_this_process` notes the processes born below this one during its block,
each by pid and start time (a pid used again is left alone), and marks all the block starts with an
environment variable of a fresh value, which Ray's workers and whatever they start inherit (a Ray
process's own /proc environ is no witness: its process title is written over it). It then starts a
watcher in a session of its own, holding the read end of a pipe whose write end only this process has:
at its end of file (this process is gone, by exit or by signal) the watcher waits `GRACE_S` for Ray's
own shutdown, then kills every noted process still alive and every process carrying the mark.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

MARK = "RECREATE_RAY_NODE"
GRACE_S = 1.0
_WATCHER = """
import os, signal, sys, time
sys.stdin.buffer.read()
time.sleep(float(sys.argv[1]))
mark = sys.argv[2].encode()
noted = dict(item.split(":") for item in sys.argv[3:])
def stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[19]
for _ in range(5):
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            hit = noted.get(pid) == stat(pid)
            if not hit:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    hit = mark in f.read().split(bytes(1))
            if hit:
                found += 1
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, IndexError):
            pass
    if not found:
        break
    time.sleep(0.2)
"""
_WATCHERS: list[subprocess.Popen[bytes]] = []  # kept for the process's life: their pipes stay open
_LASTING: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] | None = None
_LASTING_LOCK = threading.Lock()


def on_lasting_thread(fn: Callable[[], T]) -> T:
    """`fn()`, run on a thread that lasts as long as this process (one for all calls)."""
    global _LASTING
    with _LASTING_LOCK:
        if _LASTING is None:
            _LASTING = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(_LASTING,), name="ray-owner", daemon=True).start()
    done: Future[T] = Future()
    _LASTING.put((fn, done))
    return done.result()


def _serve(jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]]) -> None:
    while True:
        fn, done = jobs.get()
        try:
            done.set_result(fn())
        except BaseException as exc:  # the caller's to raise
            done.set_exception(exc)


def descendants() -> dict[str, str]:
    """The processes below this one: pid -> start time (Linux /proc)."""
    children: dict[str, list[str]] = {}
    born: dict[str, str] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone
        children.setdefault(fields[1], []).append(pid)
        born[pid] = fields[19]
    found: dict[str, str] = {}
    todo = list(children.get(str(os.getpid()), []))
    while todo:
        pid = todo.pop()
        found[pid] = born[pid]
        todo += children.get(pid, [])
    return found


@contextmanager
def reaped_with_this_process() -> Iterator[None]:
    """What the block starts (and all that starts) is killed once this process is gone (Linux;
    elsewhere the block runs as it is)."""
    if not os.path.isdir("/proc"):
        yield
        return
    before, mark = descendants(), uuid.uuid4().hex
    os.environ[MARK] = mark
    try:
        yield
    finally:
        os.environ.pop(MARK, None)
    noted = [f"{pid}:{born}" for pid, born in descendants().items() if before.get(pid) != born]
    watcher = subprocess.Popen(
        [sys.executable, "-c", _WATCHER, str(GRACE_S), f"{MARK}={mark}", *noted],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C to the driver's terminal does not end it first
    )  # fmt: skip
    _WATCHERS.append(watcher)
