"""The rollout cache: evaluated trajectories on disk under the key of everything that decides them.

A finished rollout is kept under its scaffold's hash, task id, seed and rollout key (`Rollouts.rollout_key`
hashes the task's content, the domain and its options, the model and its sampling, and the sandbox), so
a resumed run (even after kill -9) pays nothing twice, and a changed input is a miss, never a result.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import logging
import re
from pathlib import Path
from typing import Any

from recreate.config import load_settings
from recreate.domains.base import Task
from recreate.experience.schema import Trajectory, load_trajectory
from recreate.scaffold import Scaffold

log = logging.getLogger(__name__)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class RolloutCache:
    """Evaluated trajectories on disk, one JSON file per (scaffold hash, task id, seed, rollout key).

    The key (see `Rollouts.rollout_key`) is also kept in the file and checked on a lookup, so a file
    written for another task content, domain option, model or sandbox is a miss, never a result."""

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root else load_settings().home / "rollouts"

    def path(self, scaffold: Scaffold | str, task_id: str, seed: int, key: str) -> Path:
        digest = scaffold.content_hash() if isinstance(scaffold, Scaffold) else scaffold
        readable = _UNSAFE.sub("_", task_id)[:80]
        return self.root / digest[:16] / f"{readable}-{key[:16]}-s{seed}.json"

    def get(self, scaffold: Scaffold | str, task_id: str, seed: int, key: str) -> Trajectory | None:
        path = self.path(scaffold, task_id, seed, key)
        if not path.is_file():
            return None
        try:
            traj = load_trajectory(path)
        except Exception as exc:  # a damaged cache file is re-run, never trusted
            log.warning("ignoring unreadable cached rollout %s: %s", path, exc)
            return None
        if traj.evaluation is None or traj.metadata.get("rollout_key") != key:
            return None
        return traj

    def put(self, scaffold: Scaffold | str, trajectory: Trajectory, key: str) -> Path:
        seed = trajectory.seed if trajectory.seed is not None else 0
        trajectory.metadata["rollout_key"] = key
        return trajectory.save(self.path(scaffold, trajectory.task_id, seed, key))


def settings_fingerprint(obj: Any) -> dict[str, Any]:
    """The public settings of a domain or sandbox that can change a result: plain values as they are,
    callables (a Python evaluator) by name and source."""
    out: dict[str, Any] = {"type": f"{type(obj).__module__}.{type(obj).__qualname__}"}
    for name, value in sorted(getattr(obj, "__dict__", {}).items()):
        if name.startswith("_"):
            continue
        if isinstance(value, str | int | float | bool | Path) or value is None:
            out[name] = value if not isinstance(value, Path) else str(value)
        elif isinstance(value, tuple | list) and all(isinstance(v, str | int | float | Path) for v in value):
            out[name] = [str(v) for v in value]
        elif callable(value) and not inspect.isclass(value):
            out[name] = _callable_identity(value)
    return out


def _callable_identity(fn: Any) -> str:
    name = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__qualname__)}"
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return name
    return f"{name}:{hashlib.sha256(source.encode()).hexdigest()[:16]}"


def task_fingerprint(task: Task) -> str:
    """A hash of the task's whole content (prompt, files, reference, metadata), not only its id."""
    text = json.dumps(dataclasses.asdict(task), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
