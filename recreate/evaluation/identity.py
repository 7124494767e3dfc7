"""A Python value as stable JSON data for a cache key: all of it that can change what it does.

What the rollout cache keys a domain's settings and a Python evaluator by (`recreate.evaluation.cache`).
Plain values are themselves; containers go item by item; a function is its source, the values bound
into it (a partial's arguments, closure cells, defaults) and the module-level names its code reads:
helpers, constants, modules (by their files' content) and what it reads off them. Your own code is
followed that way down to MAX_DEPTH; an installed library (the standard library, site-packages) is
named by its module and file, not walked. An object is its class (by source, for your classes: method
bodies and class attributes) and its state: its public attributes, or its pickle where it has none (a
compiled pattern, an array, a slotted dataclass). Never an address: the same in every process.

Left out on purpose: private mutable globals (`_memo = {}`, `_calls = []`) are state a function keeps,
not settings; read into the key they would change it as the function runs, and every later run would
miss. Names read dynamically (`globals()[name]`, `getattr`) are not seen.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import pickle
import sysconfig
from pathlib import Path
from typing import Any

MAX_DEPTH = 8  # nesting followed into your code's helpers and bound values


def identity(value: Any) -> Any:
    """`value` as JSON data: equal for values that behave alike, in any process."""
    return _Walk().plain(value, 0)


def callable_identity(fn: Any) -> str:
    return _Walk().callable(fn, 0)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


class _Walk:
    """One walk over a value: each function or object is described once (a cycle, or the same helper
    reached twice, is then its name)."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def plain(self, value: Any, depth: int) -> Any:
        if isinstance(value, str | int | float | bool) or value is None:
            return value
        if isinstance(value, Path):
            return str(value)
        if inspect.ismodule(value):
            return f"{value.__name__}:{_file_digest(getattr(value, '__file__', None))}"
        if inspect.isclass(value):
            return _source_identity(value) if _is_yours(value) else _name(value)
        if depth > MAX_DEPTH:
            return _name(type(value))
        if isinstance(value, dict):
            items = {canonical(self.plain(k, depth + 1)): self.plain(v, depth + 1) for k, v in value.items()}
            return dict(sorted(items.items()))
        if isinstance(value, list | tuple | set | frozenset):
            items = [self.plain(v, depth + 1) for v in value]
            return sorted(items, key=canonical) if isinstance(value, set | frozenset) else items
        if id(value) in self.seen:
            return f"seen {_name(type(value))}"
        self.seen.add(id(value))
        if callable(value):
            return self.callable(value, depth + 1)
        return self.settings(value, depth + 1)

    def callable(self, fn: Any, depth: int) -> str:
        """A partial's, closure's, default's or callable object's bound values are part of it: two
        evaluators made by one factory with other thresholds are other evaluators."""
        wrapped = getattr(fn, "__wrapped__", None)  # functools.wraps, lru_cache: the body is the wrapped one
        inner = f"<{self.plain(wrapped, depth + 1)}>" if callable(wrapped) else ""
        if isinstance(fn, functools.partial):
            bound = [self.plain(fn.args, depth + 1), self.plain(fn.keywords, depth + 1)]
            return f"partial({self.plain(fn.func, depth + 1)}, {canonical(bound)})"
        if inspect.ismethod(fn):
            owner = self.settings(fn.__self__, depth + 1)
            return f"{self.plain(fn.__func__, depth + 1)}@{canonical(owner)}{inner}"
        if inspect.isbuiltin(fn):
            return _name(fn)
        if not inspect.isfunction(fn):  # an object with __call__
            return f"{canonical(self.settings(fn, depth + 1))}{inner}"
        if not _is_yours(fn):
            return _source_identity(fn) + inner
        cells = [cell.cell_contents for cell in fn.__closure__ or () if _filled(cell)]
        bound = [self.plain(v, depth + 1) for v in (cells, fn.__defaults__, fn.__kwdefaults__)]
        bound.append(self.globals_read(fn, depth + 1))
        digest = hashlib.sha256(canonical(bound).encode()).hexdigest()[:16]
        return f"{_source_identity(fn)}:{digest}{inner}"

    def globals_read(self, fn: Any, depth: int) -> dict[str, Any]:
        """The module-level names `fn`'s code reads (nested code included), and of a module among them
        the attributes its code names (`helpers.PASS_AT`, `pkg.sub.check`)."""
        names: set[str] = set()
        codes = [fn.__code__]
        while codes:
            code = codes.pop()
            names.update(code.co_names)
            codes.extend(c for c in code.co_consts if inspect.iscode(c))
        found, out = fn.__globals__, {}
        for name in sorted(names):
            value = found.get(name, _MISSING)
            if value is _MISSING or value is fn or _private_state(name, value):
                continue
            out[name] = self.plain(value, depth)
            if inspect.ismodule(value) and _is_yours(value):
                out[name] = [out[name], self.module_reads(value, names, depth + 1)]
        return out

    def module_reads(self, module: Any, names: set[str], depth: int) -> dict[str, Any]:
        reads: dict[str, Any] = {}
        for name in sorted(names):
            value = getattr(module, name, _MISSING)
            if value is _MISSING or _private_state(name, value):
                continue
            reads[name] = self.plain(value, depth)
            if inspect.ismodule(value) and _is_yours(value):  # pkg.sub.check: pkg.sub's reads too
                reads[name] = [reads[name], self.module_reads(value, names - {name}, depth + 1)]
        return reads

    def settings(self, obj: Any, depth: int) -> list[Any]:
        """An object by its class and its state: public attributes, or its pickle when it has none."""
        kind = self.plain(type(obj), depth)
        try:
            public = {k: v for k, v in vars(obj).items() if not k.startswith("_")}
        except Exception:  # no __dict__ (slots, C types), or one that raises
            public = {}
        if public:
            return [kind, self.plain(public, depth)]
        return [kind, _pickle_digest(obj)]


_MISSING = object()


def _private_state(name: str, value: Any) -> bool:
    return name.startswith("_") and isinstance(value, dict | list | set)


def _name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', type(obj).__qualname__)}"


@functools.lru_cache(maxsize=4096)
def _source_identity(obj: Any) -> str:
    try:
        source = inspect.getsource(obj)
    except (OSError, TypeError):
        return _name(obj)
    return f"{_name(obj)}:{hashlib.sha256(source.encode()).hexdigest()[:16]}"


def _pickle_digest(obj: Any) -> str:
    try:
        return hashlib.sha256(pickle.dumps(obj, protocol=4)).hexdigest()[:16]
    except Exception:  # not picklable (a lock, a connection): its class stands for it
        return ""


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


@functools.cache
def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    return tuple(str(Path(root).resolve()) + "/" for root in roots)


def _is_yours(obj: Any) -> bool:
    """Code outside the standard library and installed packages (yours, or an editable install)."""
    try:
        path = inspect.getfile(obj)
    except (TypeError, OSError):
        return False
    return not str(Path(path).resolve()).startswith(_library_roots())


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
