"""`recreate` command line. Each area adds its own sub-app in `register()`."""

from __future__ import annotations

import sys
import warnings
from typing import Any

import typer

from recreate import __version__
from recreate.cli_options import apply_conventions, common_flags, dotenv_warnings_once, exit_on_usage_error
from recreate.console import echo
from recreate.errors import one_line

app = typer.Typer(help="Create and improve domain agents from their own experience.", no_args_is_help=True)


class UserError(Exception):
    """A problem the user can fix: printed as one line, exit code 2 (traceback only with --debug)."""


_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        echo(f"recreate {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
) -> None:
    _state["debug"] = debug


def command() -> Any:
    """The `recreate` command tree, with the options every command shares (see `cli_options`)."""
    register()
    return apply_conventions(typer.main.get_command(app), common_flags(_state))


def register() -> None:
    """Attach sub-commands; each area owns its commands in its own `cli` module (once)."""
    if app.registered_commands:
        return
    from recreate import doctor
    from recreate.domains import cli as domain_cli
    from recreate.evaluation import cli as eval_cli
    from recreate.experience import cli as experience_cli
    from recreate.finetune import cli as finetune_cli
    from recreate.local import cli as model_cli
    from recreate.optimizer import cli as evolve_cli
    from recreate.sandbox import cli as sandbox_cli
    from recreate.scaffold import cli as scaffold_cli
    from recreate.ui import cli as ui_cli

    app.command("doctor")(doctor.doctor_command)
    app.command("evolve")(evolve_cli.evolve_command)
    app.command("eval")(eval_cli.eval_command)
    app.command("finetune")(finetune_cli.finetune_command)
    app.command("ui")(ui_cli.ui_command)
    app.add_typer(scaffold_cli.app, name="scaffold")
    app.add_typer(domain_cli.app, name="domain")
    app.add_typer(experience_cli.app, name="experience")
    app.add_typer(sandbox_cli.app, name="sandbox")
    app.add_typer(model_cli.app, name="model")


def _one_line_warning(message: Warning | str, category: type[Warning], *_: object) -> str:
    return f"warning: {' '.join(str(message).split())}\n"


def main() -> None:
    # a warning is said once, in one line (not with the source line that raised it)
    warnings.formatwarning = _one_line_warning  # type: ignore[assignment]
    warnings.filterwarnings("once", category=UserWarning)
    dotenv_warnings_once()
    try:
        # returns the exit code of a typer.Exit instead of raising
        code = command()(standalone_mode=False, prog_name="recreate")
    except SystemExit as exc:
        code = exc.code
    except typer.Abort:
        sys.exit(1)
    except Exception as exc:  # user-facing errors: one line, exit 2
        exit_on_usage_error(exc)
        if _state["debug"]:
            raise
        echo(f"error: {one_line(exc)}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
