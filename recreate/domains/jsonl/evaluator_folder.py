"""The folder a jsonl command evaluator sees at /evaluator: the user's evaluator folder itself, or when
the tasks files (every expected answer) or a private folder (the recreate home) lie inside it, a
world-readable copy without them, made once per content version and removed after a day unused."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from recreate.domains.common import DomainDataError, others_can_read

MAX_EVALUATOR_COPY_MB = 64  # an evaluator folder holding the tasks files is copied without them
MAX_HASHED_FILE_MB = 16  # a bigger file of the folder (data, a model) is named by its size and mtime
# version control and tool caches: what they hold changes with no change to what an evaluator does
NOT_EVALUATOR_DIRS = frozenset(
    {
        "__pycache__",
        ".git",
        ".hg",
        ".svn",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".ipynb_checkpoints",
    }
)
STALE_COPY_S = 86400  # an evaluator copy no evaluation has used for a day is removed


def evaluator_folder(folder: Path, tasks_files: list[Path], private_dirs: tuple[Path, ...] = ()) -> Path:
    """`folder` itself, or when the tasks files (every expected answer) or a private folder (the
    recreate home: trajectories, feedback, cached rollouts) lie inside it, a world-readable copy without
    them, made once per content version: the sandbox must never see those answers."""
    hidden = _Hidden({path.resolve() for path in tasks_files}, {path.resolve() for path in private_dirs})
    root = folder.resolve()
    inside = [path for path in (*hidden.files, *hidden.dirs) if path.is_relative_to(root)]
    if not inside or (os.geteuid() == 0 and not others_can_read(folder)):
        return folder  # (a folder the sandbox cannot read fails with its fix; a copy would expose it)
    kept = _files(folder, hidden)
    size = sum(path.stat().st_size for path in kept)
    if size > MAX_EVALUATOR_COPY_MB * 1024 * 1024:
        raise DomainDataError(
            f"evaluator folder {folder} holds {inside[0].name} (expected answers or run state) and "
            f"{size // 2**20} MB more; put the evaluator in a folder of its own and pass evaluator_dir=it"
        )
    stamp = "".join(f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns};" for p in kept)
    version = hashlib.sha256(f"{root}|{stamp}".encode()).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / "recreate-evaluators"
    cache.mkdir(mode=0o755, exist_ok=True)
    target = cache / version
    if target.exists():
        os.utime(target)  # in use: `_prune` keeps it
    else:
        _prune(cache)
        staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=cache))
        shutil.copytree(folder, staging, dirs_exist_ok=True, ignore=hidden.ignore)
        for directory, _, names in os.walk(staging):
            Path(directory).chmod(0o755)
            for name in names:
                Path(directory, name).chmod(0o644)
        try:
            staging.rename(target)
        except OSError:  # another process made it first
            shutil.rmtree(staging, ignore_errors=True)
    return target


def folder_hashes(
    folder: Path, tasks_files: list[Path], private_dirs: tuple[Path, ...] = ()
) -> dict[str, str]:
    """What an evaluator command can read at /evaluator, for the rollout cache's key: each file's sha256
    by its path in `folder` (a file over MAX_HASHED_FILE_MB: its size and modification time), leaving
    out what `evaluator_folder` leaves out and NOT_EVALUATOR_DIRS; linked folders followed. A helper
    module the script imports, or a data file it reads, decides the result as the script does."""
    hidden = _Hidden({path.resolve() for path in tasks_files}, {path.resolve() for path in private_dirs})
    hashes: dict[str, str] = {}
    for path in _files(folder, hidden, skip=NOT_EVALUATOR_DIRS):
        size = path.stat().st_size
        if size > MAX_HASHED_FILE_MB * 1024 * 1024:
            hashes[str(path.relative_to(folder))] = f"size {size} mtime {path.stat().st_mtime_ns}"
        else:
            hashes[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return hashes


def _files(folder: Path, hidden: _Hidden, skip: frozenset[str] = frozenset()) -> list[Path]:
    """The files below `folder` not hidden, sorted; linked folders followed (a copy copies what they
    hold), each real folder once."""
    files, seen = [], set()
    for directory, dirs, names in os.walk(folder, followlinks=True):
        real = Path(directory).resolve()
        if real in seen:  # a link back up the tree
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = [name for name in dirs if name not in skip and not hidden(Path(directory, name))]
        files += [Path(directory, name) for name in names if not hidden(Path(directory, name))]
    return sorted(path for path in files if path.is_file())


def _prune(cache: Path) -> None:
    """Remove the copies no evaluation has used for `STALE_COPY_S` (each run copies its folders anew
    when their files change; nothing else would ever remove them)."""
    stale = time.time() - STALE_COPY_S
    for entry in cache.iterdir():
        with contextlib.suppress(OSError):
            if entry.stat().st_mtime < stale:
                shutil.rmtree(entry, ignore_errors=True)


@dataclass(frozen=True)
class _Hidden:
    """What the evaluator's copy leaves out, by resolved path (a link to a hidden file is hidden too)."""

    files: set[Path]
    dirs: set[Path]

    def __call__(self, path: Path) -> bool:
        real = path.resolve()
        return real in self.files or any(real.is_relative_to(d) for d in self.dirs)

    def ignore(self, directory: str, names: list[str]) -> list[str]:
        return [name for name in names if self(Path(directory, name))]
