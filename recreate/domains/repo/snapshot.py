"""Repository snapshots on the host: git bundles (or repositories) holding each instance's base commit.

`base_tree(snapshot, commit)` is the tar of the repository at that commit, what the agent's workspace
and the evaluation sandbox start from; only the tree travels, never the history (the fix would be in
it). `GitRepo` is what the task builder writes snapshots with: commits with fixed authors and dates,
so the same inputs give the same commit ids.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import threading
from pathlib import Path

from recreate.config import load_settings

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "recreate",
    "GIT_AUTHOR_EMAIL": "recreate@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "recreate",
    "GIT_COMMITTER_EMAIL": "recreate@localhost",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}
_TREES: dict[tuple[str, str], bytes] = {}
_TREES_LOCK = threading.Lock()
_MAX_CACHED_TREES = 64


class SnapshotError(RuntimeError):
    """A snapshot cannot be read; the message names it and what to do."""


def git(*args: str, cwd: Path | None = None, data: bytes | None = None) -> bytes:
    env = {**os.environ, **GIT_IDENTITY}
    done = subprocess.run(["git", *args], cwd=cwd, input=data, capture_output=True, env=env)
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        raise SnapshotError(f"git {args[0]} failed in {cwd or os.getcwd()}: {message}")
    return done.stdout


def _clone_of(bundle: Path) -> Path:
    """A bare clone of a bundle file, made once per bundle version under RECREATE_HOME/cache."""
    stat = bundle.stat()
    version = hashlib.sha256(f"{bundle}:{stat.st_mtime_ns}:{stat.st_size}".encode()).hexdigest()[:16]
    target = load_settings().home / "cache" / "repo-snapshots" / f"{bundle.stem}-{version}.git"
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_dir():
            staging = target.with_name(f".{target.name}-{os.getpid()}")
            shutil.rmtree(staging, ignore_errors=True)
            git("clone", "--quiet", "--mirror", str(bundle), str(staging))
            staging.rename(target)
    return target


def base_tree(snapshot: Path, commit: str) -> bytes:
    """The tar (uncompressed) of `commit`'s tree in `snapshot` (a .bundle file or a git repository)."""
    key = (str(snapshot), commit)
    with _TREES_LOCK:
        if key in _TREES:
            return _TREES[key]
    if not snapshot.exists():
        raise SnapshotError(f"snapshot {snapshot} does not exist")
    repository = _clone_of(snapshot) if snapshot.is_file() else snapshot
    try:
        data = git("archive", "--format=tar", commit, cwd=repository)
    except SnapshotError as exc:
        raise SnapshotError(f"{snapshot} has no commit {commit}: {exc}") from None
    with _TREES_LOCK:
        if len(_TREES) >= _MAX_CACHED_TREES:
            _TREES.pop(next(iter(_TREES)))
        _TREES[key] = data
    return data


class GitRepo:
    """A working repository with deterministic commits (the builder's scratch repository)."""

    def __init__(self, path: Path):
        self.path = path
        if not (path / ".git").exists():
            git("init", "--quiet", "--initial-branch=base", cwd=path)

    def commit_all(self, message: str) -> str:
        git("add", "--all", "--force", ".", cwd=self.path)
        git("commit", "--quiet", "--allow-empty", "--no-verify", "-m", message, cwd=self.path)
        return git("rev-parse", "HEAD", cwd=self.path).decode().strip()

    def checkout(self, commit: str) -> None:
        git("checkout", "--quiet", "--force", "--detach", commit, cwd=self.path)
        git("clean", "--quiet", "-fdx", cwd=self.path)

    def tag(self, name: str, commit: str) -> None:
        git("tag", "--force", name, commit, cwd=self.path)

    def diff(self, old: str, new: str) -> str:
        return git("diff", "--no-color", "--no-ext-diff", old, new, cwd=self.path).decode()

    def archive(self, commit: str) -> bytes:
        return git("archive", "--format=tar", commit, cwd=self.path)

    def bundle(self, out: Path) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        git(
            "-c",
            "pack.threads=1",
            "bundle",
            "create",
            "--quiet",
            str(out.absolute()),
            "--tags",
            cwd=self.path,
        )
