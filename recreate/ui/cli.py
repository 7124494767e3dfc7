"""`recreate ui`: serve the read-only web app over the recreate home."""

from __future__ import annotations

from pathlib import Path

import typer

from recreate.cli_options import home_option
from recreate.config import load_settings
from recreate.console import echo


def ui_command(
    home: Path = home_option(),
    host: str = typer.Option("127.0.0.1", "--host", help="address to bind; only this machine by default"),
    port: int = typer.Option(8765, "--port", min=1, max=65535, help="port to listen on"),
    allow_host: list[str] = typer.Option(
        [],
        "--allow-host",
        help="another name this server is reached by (repeatable; default: the bound host, "
        "localhost, 127.0.0.1, [::1])",
    ),
) -> None:
    """A local web app over the home: runs, lineage with evidence, trajectories, experience, training."""
    try:
        from recreate.ui.app import serve
    except ImportError as exc:
        raise typer.BadParameter(
            f"the ui extra is not installed ({exc.name} is missing): pip install 'recreate[ui]'"
        ) from None
    settings = load_settings(home=home)
    if not settings.home.is_dir():
        raise typer.BadParameter(f"{settings.home} is not a directory: pass --home DIR (a recreate home)")
    echo(f"recreate ui on http://{host}:{port}/ over {settings.home} (read-only; Ctrl-C stops it)")
    serve(settings.home, host=host, port=port, allow_hosts=allow_host, embedding=settings.embedding,
          chroma_url=settings.chroma_url)  # fmt: skip
