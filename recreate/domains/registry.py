"""Domain names -> implementations: `get_domain("math", data="aime24.jsonl", seed=1)`."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

from recreate.domains.base import Domain

# name -> (package, class, one-line summary); imported lazily so `recreate --help` stays fast. A new
# built-in domain: a package recreate/domains/<name>/ (domain, checks/, env, cli as it needs) + a row here
BUILTIN_DOMAINS: dict[str, tuple[str, str, str]] = {
    "math": (
        "recreate.domains.math",
        "MathDomain",
        "AIME/AMC-style JSONL; final answer checked exactly (integers) or with math-verify",
    ),
    "ds1000": (
        "recreate.domains.ds1000",
        "DS1000Domain",
        "DS-1000 data-science code; the problem's tests run in a sandbox with pinned libraries",
    ),
    "repo": (
        "recreate.domains.repo",
        "RepoDomain",
        "fix a repository so its own tests pass (SWE-bench schema: built from PyPI sdists, or SWE-bench)",
    ),
    "jsonl": (
        "recreate.domains.jsonl",
        "JsonlDomain",
        "custom tasks file + evaluator command (sandboxed) or Python function",
    ),
}


class UnknownDomainError(ValueError):
    """No domain of that name, or options it does not take."""


def list_domains() -> list[tuple[str, str]]:
    return [(name, summary) for name, (_, _, summary) in BUILTIN_DOMAINS.items()]


def domain_class(name: str) -> type:
    if name not in BUILTIN_DOMAINS:
        raise UnknownDomainError(f"unknown domain {name!r}; known domains: {', '.join(BUILTIN_DOMAINS)}")
    module, cls, _ = BUILTIN_DOMAINS[name]
    return getattr(importlib.import_module(module), cls)


def get_domain(name: str, data: str | Path | None = None, **options: Any) -> Domain:
    """A domain loaded from a local path. Options go to the domain (seed, train, val, timeout, ...)."""
    cls = domain_class(name)
    if data is None:
        raise UnknownDomainError(f"domain {name!r} needs data=PATH (a .jsonl file or a folder of them)")
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "data")]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise UnknownDomainError(
            f"domain {name!r} takes no option(s) {', '.join(unknown)}; it takes: {', '.join(accepted)}"
        )
    return cls(data, **options)
