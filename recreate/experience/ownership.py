"""Which process may write an embedded Chroma index directory.

Embedded Chroma keeps its vector index in process memory and flushes it to disk, so two processes
writing the same directory lose each other's vectors (measured: the last writer wins). One process at a
time therefore owns a directory for writing: an flock on `<dir>.owner.lock`, taken at its first write
and given up when the process closes its last index of that directory (or exits, even on SIGKILL).
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path


class IndexBusyError(RuntimeError):
    """Another process owns the embedded index for writing."""


_owned: dict[str, int] = {}  # resolved index path -> fd holding the owner flock, for this process
_open: dict[str, int] = {}  # resolved index path -> how many embedded indexes of it this process has open
_owned_lock = threading.Lock()


def owns(path: Path) -> bool:
    """Take (or confirm) this process's write ownership of an embedded index directory."""
    key = str(path.resolve())
    with _owned_lock:
        if key in _owned:
            return True
        fd = os.open(key + ".owner.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        _owned[key] = fd  # held until `release` or exit: the kernel releases it even on SIGKILL
        return True


def opened(path: Path) -> str:
    key = str(path.resolve())
    with _owned_lock:
        _open[key] = _open.get(key, 0) + 1
    return key


def release(key: str) -> None:
    """One index of the directory closed; the last one gives up the ownership (and the lock's fd)."""
    with _owned_lock:
        _open[key] -= 1
        if _open[key]:
            return
        del _open[key]
        fd = _owned.pop(key, None)
        if fd is not None:
            os.close(fd)
