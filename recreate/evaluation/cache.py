"""The rollout cache: evaluated trajectories on disk under the key of everything that decides them.

A finished rollout is kept under its scaffold's hash, task id, seed and rollout key (`Rollouts.rollout_key`
hashes the task's content, the domain and its options and code (its checks included), its evaluator (a
Python evaluator as `recreate.evaluation.identity` describes it: source, bound values, the helpers,
constants and modules it reads; the files a command evaluator can read), the model and its sampling, and the
sandbox), so a resumed run (even after kill -9) pays nothing twice, and a changed input is a miss, never
a result.
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
from recreate.evaluation.identity import callable_identity, identity
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
    callables (a Python evaluator) as `recreate.evaluation.identity` describes them."""
    out: dict[str, Any] = {"type": f"{type(obj).__module__}.{type(obj).__qualname__}"}
    for name, value in sorted(getattr(obj, "__dict__", {}).items()):
        if name.startswith("_"):
            continue
        if isinstance(value, str | int | float | bool | Path) or value is None:
            out[name] = value if not isinstance(value, Path) else str(value)
        elif isinstance(value, tuple | list | dict):  # e.g. the math checker's library binds (pairs)
            out[name] = identity(value)
        elif callable(value) and not inspect.isclass(value):
            out[name] = callable_identity(value)
    evaluator_hashes = getattr(obj, "evaluator_hashes", None)
    if callable(evaluator_hashes):  # files a command evaluator reads: not in its settings, yet they decide
        out["evaluator_files"] = evaluator_hashes()
    out["code"] = code_digest(type(obj))
    return out


def code_digest(cls: type) -> str:
    """A hash of the code that defines `cls`: the Python files of its module's folder and of the
    `checks` folder beside it (what a domain runs in its sandbox). A fixed checker is another
    evaluator: its old verdicts are no results of the new one."""
    try:
        folder = Path(inspect.getfile(cls)).parent
    except (TypeError, OSError):
        return ""
    files = sorted([*folder.glob("*.py"), *(folder / "checks").rglob("*.py")])
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.relative_to(folder)}\0".encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def task_fingerprint(task: Task) -> str:
    """A hash of the task's whole content (prompt, files, reference, metadata), not only its id."""
    text = json.dumps(dataclasses.asdict(task), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
