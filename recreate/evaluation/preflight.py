"""What a run needs from this machine, checked before any model server starts.

`preflight(sandbox, domain, home)` raises `PreflightError` with one line that names the problem and its
fix when the sandbox backend does not open a session and run `true` in it (with the spec the domain's
agent works in), when the domain says its environment is not ready (`environment_problem()`) or its
evaluator cannot run in that backend (`evaluator_problem(sandbox)`; each where a domain defines it), or
when the state directory has less than `min_free_mb` free. Seconds, not minutes: a run that would store
nothing but errors is refused at once.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from recreate.domains.base import Domain
from recreate.evaluation.machine import probe
from recreate.evaluation.rollout import agent_sandbox_spec
from recreate.sandbox import BACKENDS, Sandbox, SandboxError, resolve_sandbox
from recreate.sandbox.base import SandboxSpec

MIN_FREE_MB = 512


class PreflightError(RuntimeError):
    """The machine cannot do the run as asked; the message says what to change."""


def preflight(sandbox: str | Sandbox, domain: Domain, home: Path, *, min_free_mb: int = MIN_FREE_MB) -> None:
    check_disk(home, min_free_mb)
    backend = check_sandbox(sandbox, agent_sandbox_spec(domain))
    problem: Callable[[], str | None] | None = getattr(domain, "environment_problem", None)
    found = problem() if callable(problem) else None
    evaluator: Callable[[Sandbox], str | None] | None = getattr(domain, "evaluator_problem", None)
    found = found or (evaluator(backend) if callable(evaluator) else None)
    if found:
        raise PreflightError(f"domain {domain.name}: {found}")


def check_sandbox(sandbox: str | Sandbox, spec: SandboxSpec | None = None) -> Sandbox:
    """The backend (returned) is installed, opens a session with `spec` and runs `true` in it."""
    name = sandbox if isinstance(sandbox, str) else sandbox.name
    others = " or ".join(f"--sandbox {b}" for b in BACKENDS if b not in (name, "local"))
    try:
        backend = resolve_sandbox(sandbox)
        ok, detail = backend.available()
    except SandboxError as exc:
        raise PreflightError(f"sandbox {name}: {exc}") from None
    if not ok:
        raise PreflightError(
            f"sandbox {name}: not usable here: {detail}{f' (or {others})' if others else ''}"
        )
    broken = probe(backend, spec)
    if broken:
        raise PreflightError(
            f"sandbox {name}: {broken}; `recreate sandbox status` lists the backends that work here"
        )
    return backend


def check_disk(home: Path, min_free_mb: int = MIN_FREE_MB) -> None:
    """`home` (or the folder it will be made in) has at least `min_free_mb` MB free."""
    place = next((p for p in [home, *home.absolute().parents] if p.exists()), Path("/"))
    free_mb = shutil.disk_usage(place).free // (1024 * 1024)
    if free_mb < min_free_mb:
        raise PreflightError(
            f"{home}: only {free_mb} MB free (a run needs {min_free_mb} MB for its logs, caches and "
            "checkpoints); free some space or pass another --home (RECREATE_HOME)"
        )
