"""What `recreate domain setup repo` and `recreate domain build repo` do (registered in ../cli.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer
from rich.console import Console

from recreate.config import load_settings
from recreate.console import echo
from recreate.domains.common import DomainDataError, jsonl_files
from recreate.domains.repo.env import distinct_environments, ensure_env
from recreate.domains.repo.instance import load_instances
from recreate.envbuild import EnvBuildError


def setup_repo(data: Path | None, console: Console) -> None:
    """Build the venv of every distinct environment the instances in `data` name (cached)."""
    if data is None:
        raise typer.BadParameter(
            "repo builds the environments its instances name: pass --data FILE", param_hint="--data"
        )
    try:
        instances = [i for path in jsonl_files(data) for i in load_instances(path)]
    except DomainDataError as exc:
        raise typer.BadParameter(str(exc), param_hint="--data") from None
    environments = distinct_environments(i.environment for i in instances)
    if not environments:
        console.print("every instance runs in its own docker image; nothing to build here")
    for environment in environments:
        try:
            ready = ensure_env(environment, load_settings().home, echo=console.print)
        except EnvBuildError as exc:
            echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        console.print(f"repo test environment ready: {ready}", soft_wrap=True)


def model_chat(spec: str) -> Callable[[list[dict[str, str]]], str]:
    """A function from chat messages to the model's reply text."""
    from recreate.models import make_chat_model

    model = make_chat_model(spec, role="agent", temperature=0.0)

    def chat(messages: list[dict[str, str]]) -> str:
        return model.invoke([(m["role"], m["content"]) for m in messages]).text

    return chat


def build_repo(
    source: str,
    out: Path,
    *,
    n: int,
    seed: int,
    model: str | None,
    sandbox: str | None,
    install: tuple[str, ...],
    timeout: float,
) -> None:
    from recreate.domains.repo.build import Builder, BuildError
    from recreate.sandbox import get_sandbox

    chat = model_chat(model) if model else None
    builder = Builder(
        get_sandbox(sandbox or load_settings().sandbox),
        seed=seed,
        install=install,
        timeout=timeout,
        chat=chat,
        echo=lambda line: echo(line),
    )
    try:
        builder.build(source, out, n=n)
    except (BuildError, EnvBuildError) as exc:
        echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
