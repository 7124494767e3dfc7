"""The rollout cache: evaluated trajectories on disk under the key of everything that decides them.

A finished rollout is kept under its scaffold's hash, task id, seed and rollout key (`Rollouts.rollout_key`
hashes the task's content, the domain and its options and code (its checks included), its evaluator (a
Python evaluator's source, bound values and the globals it reads: helpers, constants, modules' files; a
command evaluator's scripts), the model and its sampling, and the sandbox), so a resumed run (even after
kill -9) pays nothing twice, and a changed input is a miss, never a result.
"""

from __future__ import annotations

import dataclasses
import functools
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
    callables (a Python evaluator) by name, source and the values bound into them."""
    out: dict[str, Any] = {"type": f"{type(obj).__module__}.{type(obj).__qualname__}"}
    for name, value in sorted(getattr(obj, "__dict__", {}).items()):
        if name.startswith("_"):
            continue
        if isinstance(value, str | int | float | bool | Path) or value is None:
            out[name] = value if not isinstance(value, Path) else str(value)
        elif isinstance(value, tuple | list | dict):  # e.g. the math checker's library binds (pairs)
            out[name] = _plain(value)
        elif callable(value) and not inspect.isclass(value):
            out[name] = _callable_identity(value)
    script_hashes = getattr(obj, "script_hashes", None)
    if callable(script_hashes):  # files a command evaluator runs: not in its settings, yet they decide
        out["scripts"] = script_hashes()
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


def _callable_identity(fn: Any, depth: int = 0) -> str:
    """A callable by name and source, with the values bound into it (a partial's arguments, a closure's
    cells, defaults, a callable object's or a bound method's settings): two evaluators made by one factory
    with other thresholds are other evaluators."""
    if isinstance(fn, functools.partial):
        bound = [_plain(fn.args, depth + 1), _plain(fn.keywords, depth + 1)]
        return f"partial({_callable_identity(fn.func, depth + 1)}, {_canonical(bound)})"
    if inspect.ismethod(fn):
        owner = _settings(fn.__self__, depth + 1)
        return f"{_callable_identity(fn.__func__, depth + 1)}@{_canonical(owner)}"
    if inspect.isbuiltin(fn) or inspect.isclass(fn):
        return _source_identity(fn)
    if not inspect.isfunction(fn):  # an object with __call__
        return f"{_source_identity(type(fn))}@{_canonical(_settings(fn, depth + 1))}"
    cells = [cell.cell_contents for cell in fn.__closure__ or () if _filled(cell)]
    bound = [_plain(v, depth + 1) for v in (cells, fn.__defaults__, fn.__kwdefaults__)]
    bound.append(_plain(_globals_read(fn), depth + 1))  # helpers' globals too, down to _MAX_DEPTH
    return f"{_source_identity(fn)}:{hashlib.sha256(_canonical(bound).encode()).hexdigest()[:16]}"


def _globals_read(fn: Any) -> dict[str, Any]:
    """The module-level names a function's code reads, nested code included: its helpers, constants and
    modules decide its verdicts as much as its own source does (a changed threshold or helper of an
    unchanged evaluator)."""
    names: set[str] = set()
    codes = [fn.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if inspect.iscode(c))
    found = fn.__globals__
    return {name: found[name] for name in sorted(names) if name in found and found[name] is not fn}


def _source_identity(obj: Any) -> str:
    name = f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', type(obj).__qualname__)}"
    try:
        source = inspect.getsource(obj)
    except (OSError, TypeError):
        return name
    return f"{name}:{hashlib.sha256(source.encode()).hexdigest()[:16]}"


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


_MAX_DEPTH = 4  # nesting followed into bound values (a self-referencing closure stops here)


def _plain(value: Any, depth: int = 0) -> Any:
    """`value` as JSON data that is the same in every process: plain values as they are, containers
    item by item, callables by identity, other objects by type and public settings (never an address)."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, Path):
        return str(value)
    if inspect.ismodule(value):
        return f"{value.__name__}:{_file_digest(getattr(value, '__file__', None))}"
    if depth > _MAX_DEPTH:
        return type(value).__qualname__
    if isinstance(value, dict):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [_plain(v, depth + 1) for v in value]
        return sorted(items, key=_canonical) if isinstance(value, set | frozenset) else items
    if callable(value) and not inspect.isclass(value):
        return _callable_identity(value, depth + 1)
    return _settings(value, depth + 1)


@functools.lru_cache(maxsize=512)
def _file_digest_at(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def _file_digest(path: str | None) -> str:
    """A module's file by content (a helper module edited between runs), cached by its mtime and size."""
    if not path:
        return ""
    try:
        stat = Path(path).stat()
        return _file_digest_at(path, stat.st_mtime_ns, stat.st_size)
    except OSError:
        return ""


def _settings(obj: Any, depth: int) -> list[Any]:
    """An object by its type and its public attributes."""
    public = {k: v for k, v in getattr(obj, "__dict__", {}).items() if not k.startswith("_")}
    return [f"{type(obj).__module__}.{type(obj).__qualname__}", _plain(public, depth)]


def task_fingerprint(task: Task) -> str:
    """A hash of the task's whole content (prompt, files, reference, metadata), not only its id."""
    text = json.dumps(dataclasses.asdict(task), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
