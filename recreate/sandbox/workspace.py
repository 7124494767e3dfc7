"""Moving files in and out of a workspace without following links out of it.

Paths are resolved one component at a time from a directory fd with O_NOFOLLOW, so a symlink planted
by sandboxed code (`ws/x -> /root/.ssh/id_rsa`, or `ws/dir -> /etc`) cannot make `put`/`get` touch
anything outside the workspace.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import stat
from pathlib import Path
from typing import IO

from recreate.sandbox.base import SandboxError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def workspace_parts(path: str, workdir: str) -> list[str]:
    """Components of `path` relative to the workspace; `path` is relative to it or absolute under it."""
    if not path or "\0" in path:
        raise SandboxError(f"invalid workspace path {path!r}")
    if posixpath.isabs(path):
        norm, root = posixpath.normpath(path), posixpath.normpath(workdir)
        if norm != root and not norm.startswith(root.rstrip("/") + "/"):
            raise SandboxError(f"{path!r} is outside the workspace {workdir!r}")
        path = posixpath.relpath(norm, root)
    parts = [part for part in posixpath.normpath(path).split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise SandboxError(f"{path!r} does not name a file inside the workspace")
    return parts


def as_bytes(data: bytes | str | IO[bytes] | Path) -> tuple[bytes, int]:
    """The content to write and its file mode (executable sources stay executable)."""
    if isinstance(data, Path):
        executable = os.access(data, os.X_OK)
        return data.read_bytes(), 0o755 if executable else 0o644
    if isinstance(data, str):
        return data.encode(), 0o644
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data), 0o644
    return data.read(), 0o644


def write_file(
    root: Path, parts: list[str], data: bytes, mode: int = 0o644, owner: tuple[int, int] | None = None
) -> None:
    """Create or replace `root/parts...`, creating parent directories, refusing symlinks on the way."""
    dir_fd = _open_dir(root, parts[:-1], create=True, owner=owner)
    try:
        try:
            fd = os.open(
                parts[-1],
                os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                mode,
                dir_fd=dir_fd,
            )
        except OSError as exc:
            raise SandboxError(f"cannot write {'/'.join(parts)!r} in the workspace: {exc.strerror}") from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SandboxError(f"{'/'.join(parts)!r} exists and is not a regular file")
            os.fchmod(fd, mode)
            if owner is not None:
                os.fchown(fd, *owner)
            with os.fdopen(fd, "wb", closefd=False) as handle:
                handle.write(data)
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def read_file(root: Path, parts: list[str], max_bytes: int) -> bytes:
    """Content of the regular file `root/parts...`; links, fifos and devices are refused."""
    dir_fd = _open_dir(root, parts[:-1], create=False, owner=None)
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            raise SandboxError(f"cannot read {'/'.join(parts)!r} from the workspace: {exc.strerror}") from exc
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise SandboxError(f"{'/'.join(parts)!r} is not a regular file")
            if info.st_size > max_bytes:
                raise SandboxError(
                    f"{'/'.join(parts)!r} is {info.st_size} bytes, over the {max_bytes} byte limit"
                )
            return handle.read(max_bytes + 1)[:max_bytes]
    finally:
        os.close(dir_fd)


def _open_dir(root: Path, parts: list[str], *, create: bool, owner: tuple[int, int] | None) -> int:
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                    if owner is not None:
                        os.chown(part, *owner, dir_fd=fd, follow_symlinks=False)
            try:
                next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise SandboxError(
                    f"cannot use {part!r} as a workspace directory (a symlink, or missing?): {exc.strerror}"
                ) from exc
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd
