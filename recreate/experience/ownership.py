"""Which process may write an embedded Chroma index directory.

Embedded Chroma keeps its vector index in process memory and flushes it to disk, so two processes
writing the same directory lose each other's vectors (measured: the last writer wins). One process at a
time therefore owns a directory for writing: a `filelock.FileLock` on `<dir>.owner.lock` (an flock on
Unix), taken at its first write and given up when the process closes its last index of that directory
(or exits, even on SIGKILL: the kernel drops the lock with the process). One lock object per directory,
not tied to the thread that took it (`thread_local=False`): any thread may close the last index.
"""

from __future__ import annotations

import threading
from pathlib import Path

from filelock import FileLock, Timeout


class IndexBusyError(RuntimeError):
    """Another process owns the embedded index for writing."""


_owned: dict[str, FileLock] = {}  # resolved index path -> the owner lock this process holds
_open: dict[str, int] = {}  # resolved index path -> how many embedded indexes of it this process has open
_owned_lock = threading.Lock()


def owns(path: Path) -> bool:
    """Take (or confirm) this process's write ownership of an embedded index directory."""
    key = str(path.resolve())
    with _owned_lock:
        if key in _owned:
            return True
        lock = FileLock(key + ".owner.lock", thread_local=False)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return False
        _owned[key] = lock  # held until `release` or exit
        return True


def opened(path: Path) -> str:
    key = str(path.resolve())
    with _owned_lock:
        _open[key] = _open.get(key, 0) + 1
    return key


def release(key: str) -> None:
    """One index of the directory closed; the last one gives up the ownership (and the lock's file)."""
    with _owned_lock:
        _open[key] -= 1
        if _open[key]:
            return
        del _open[key]
        lock = _owned.pop(key, None)
        if lock is not None:
            lock.release(force=True)
