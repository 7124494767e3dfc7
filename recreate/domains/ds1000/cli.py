"""What `recreate domain setup ds1000` does (registered in ../cli.py): build the pinned evaluation venv."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from recreate.config import load_settings
from recreate.console import echo
from recreate.domains.ds1000.env import GROUPS, default_env_path, ensure_env
from recreate.envbuild import EnvBuildError


def setup_ds1000(
    path: Path | None, python: str | None, groups: str, data: Path | None, console: Console
) -> None:
    """Build the pinned DS-1000 venv at `path` (default: <RECREATE_HOME>/envs/ds1000) unless it is there
    with the optional library `groups` ("pytorch,tensorflow", "all") and those the tasks in `data` need."""
    extras = parse_groups(groups)
    target = path or default_env_path(load_settings().home)
    if data is not None:
        from recreate.domains.ds1000.domain import DS1000Domain  # (its imports: only when data is given)

        needed = DS1000Domain(data, env=target).needed_groups()
        extras = sorted(set(extras) | set(needed))
    try:
        ready = ensure_env(target, python=python, echo=console.print, extras=extras)
    except EnvBuildError as exc:
        echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    console.print(f"DS-1000 environment ready: {ready}", soft_wrap=True)


def parse_groups(text: str) -> list[str]:
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    if "all" in names:
        return list(GROUPS)
    unknown = [name for name in names if name not in GROUPS]
    if unknown:
        known = ", ".join([*GROUPS, "all"])
        raise typer.BadParameter(f"unknown library group {unknown[0]!r}; known: {known}", param_hint="--with")
    return names
