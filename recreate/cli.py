"""`recreate` command line. Each area adds its own sub-app in `register()`."""

from __future__ import annotations

import sys

import typer

from recreate import __version__

app = typer.Typer(help="Create and improve domain agents from their own experience.", no_args_is_help=True)


class UserError(Exception):
    """A problem the user can fix: printed as one line, exit code 2 (traceback only with --debug)."""


_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"recreate {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
) -> None:
    _state["debug"] = debug


def register() -> None:
    """Attach sub-commands. One line per area; each module owns its own typer app."""
    from recreate import doctor

    app.command("doctor")(doctor.doctor_command)
    # -- areas register below this line --
    app.add_typer(__import__("recreate.sandbox.cli", fromlist=["app"]).app, name="sandbox")
    app.command("evolve")(__import__("recreate.optimizer.cli", fromlist=["x"]).evolve_command)
    app.add_typer(__import__("recreate.domains.cli", fromlist=["app"]).app, name="domain")
    app.add_typer(__import__("recreate.scaffold.cli", fromlist=["app"]).app, name="scaffold")
    app.add_typer(__import__("recreate.experience.cli", fromlist=["app"]).app, name="experience")
    app.command("eval")(__import__("recreate.evaluation.cli", fromlist=["x"]).eval_command)


def main() -> None:
    register()
    try:
        app(standalone_mode=False)
    except (typer.Exit, SystemExit) as exc:
        code = exc.exit_code if isinstance(exc, typer.Exit) else exc.code
        sys.exit(code or 0)
    except Exception as exc:  # user-facing errors: one line, exit 2
        from click.exceptions import Abort, ClickException

        if isinstance(exc, ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, Abort):
            sys.exit(1)
        if _state["debug"]:
            raise
        typer.echo(f"error: {_one_line(exc)}", err=True)
        sys.exit(2)


def _one_line(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())
