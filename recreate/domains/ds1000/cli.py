"""What `recreate domain setup ds1000` does (registered in ../cli.py): build the pinned evaluation venv."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from recreate.config import load_settings
from recreate.console import echo
from recreate.domains.ds1000.env import default_env_path, ensure_env
from recreate.envbuild import EnvBuildError


def setup_ds1000(path: Path | None, python: str | None, console: Console) -> None:
    """Build the pinned DS-1000 venv at `path` (default: <RECREATE_HOME>/envs/ds1000) unless it is there."""
    try:
        ready = ensure_env(path or default_env_path(load_settings().home), python=python, echo=console.print)
    except EnvBuildError as exc:
        echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    console.print(f"DS-1000 environment ready: {ready}", soft_wrap=True)
