"""Conventions every `recreate` and `tapo` command follows: one name per concept, shared options,
help that renders as written.

- `--home` on every command that reads or writes state; `--sandbox` for the backend; `--run` names a
  run; `--random-seed` is the random seed (`--seed` on evolve is the seed scaffold); counts of repeated
  runs (`--seeds`, `--val-seeds`, ...) say so in their help.
- An old spelling stays as a hidden alias that says, in one line, which name replaces it.
- `--json` prints the command's result as one JSON document on stdout; everything else goes to stderr.
- `--quiet`, `--verbose` and `--debug` are accepted after any subcommand (added by `apply_conventions`).
- A number option takes a finite number: `nan` and `inf` are usage errors (`apply_conventions`).
- What an option changes for the whole process (RECREATE_HOME, sys.stdout, log levels and handlers)
  is put back when the command ends, however it ends: a command called in-process (a notebook, a test,
  `recreate.cli.main()`) leaves its caller's process as it found it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click
import typer

from recreate.console import PrintableFormatter, echo, set_quiet

T = TypeVar("T")
_json: dict[str, Any] = {}
_LOGGERS = ("recreate", "tapo_backend")
HOME_HELP = "State directory (default: RECREATE_HOME, else .recreate)."
SANDBOX_HELP = "Sandbox backend: bwrap, docker or local (default: RECREATE_SANDBOX, else bwrap)."


def home_option() -> Any:
    """--home DIR is RECREATE_HOME=DIR for the whole command: what reads the home itself (rollout cache,
    domain environments, servers it starts) sees the same one."""
    return typer.Option(None, "--home", help=HOME_HELP, show_default=False, callback=_export_home)


def _export_home(ctx: typer.Context, value: Path | None) -> Path | None:
    if value is not None:
        before = os.environ.get("RECREATE_HOME")
        _undo_at_end(ctx, lambda: _set_env("RECREATE_HOME", before))
        os.environ["RECREATE_HOME"] = str(value)
    return value


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _undo_at_end(ctx: click.Context, undo: Callable[[], None]) -> None:
    """Run `undo` when the whole command ends: it returns, raises, or a later option fails to parse
    (the root context closes in each case; a leaf's context does not exist yet in the last)."""
    ctx.find_root().call_on_close(undo)


def sandbox_option(help: str = SANDBOX_HELP) -> Any:
    return typer.Option(None, "--sandbox", help=help, show_default=False, callback=_known_sandbox)


def _known_sandbox(value: str | None) -> str | None:
    from recreate.sandbox import BACKENDS

    if value is not None and value not in BACKENDS:
        raise typer.BadParameter(f"unknown sandbox backend {value!r}; one of {', '.join(BACKENDS)}")
    return value


def key_file_option() -> Any:
    return typer.Option(
        None,
        "--key-file",
        help="Require the key written in this file (one line, mode 600) instead of a new key each start: "
        "for clients that keep their key across restarts.",
    )


def executor_option() -> Any:
    return typer.Option(
        "threads",
        "--executor",
        help="Where rollouts run: threads (this process), ray (a Ray on this machine, 127.0.0.1 only) or "
        "ray://HOST:PORT (a Ray cluster; see README 'Scaling out').",
    )


def json_option(what: str = "the result") -> Any:
    """--json: from the moment it is parsed, the command's own printing goes to stderr and
    `emit_json(doc)` alone writes to stdout."""
    return typer.Option(
        False,
        "--json",
        help=f"Print {what} as JSON on stdout (all else goes to stderr).",
        callback=_json_mode,
    )


def _json_mode(ctx: typer.Context, value: bool) -> bool:
    if value:
        stdout, before = sys.stdout, _json.get("stdout")

        def restore() -> None:
            sys.stdout = stdout
            _json["stdout"] = before

        _undo_at_end(ctx, restore)
        _json["stdout"] = stdout
        sys.stdout = sys.stderr
    return value


def emit_json(doc: Any) -> None:
    """The --json result on the real stdout (a JSON document, one per command)."""
    out = _json.get("stdout") or sys.stdout
    out.write(json.dumps(doc, indent=2, default=str) + "\n")
    out.flush()


def deprecated(old: str, new: str, *short: str) -> Any:
    """A hidden old spelling of `new`: still accepted, with a one-line notice on stderr."""

    def notice(value: Any) -> Any:
        if value is not None:
            echo(f"note: {old} is deprecated; use {new}", err=True)
        return value

    return typer.Option(
        None, old, *short, hidden=True, help=f"Deprecated spelling of {new}.", callback=notice
    )


def prefer(value: T | None, old_value: T | None, new: str) -> T | None:
    """The value of an option given under its name or its deprecated alias (not both, differently)."""
    if old_value is None:
        return value
    if value is not None and value != old_value:
        raise typer.BadParameter(f"given twice ({value!r} and {old_value!r}); pass it once", param_hint=[new])
    return old_value


def _set_quiet(ctx: typer.Context, value: bool) -> None:
    if value:
        _keep_loggers(ctx)
        set_quiet(True)
        _undo_at_end(ctx, lambda: set_quiet(False))
        logging.getLogger("recreate").setLevel(logging.WARNING)


def _set_verbose(ctx: typer.Context, value: bool) -> None:
    if value:
        _keep_loggers(ctx)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(PrintableFormatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        for name in _LOGGERS:
            logger = logging.getLogger(name)
            logger.setLevel(logging.DEBUG)
            logger.addHandler(handler)


def _keep_loggers(ctx: click.Context) -> None:
    """The packages' loggers get their levels and handlers back when the command ends."""
    kept = [(logger, logger.level, list(logger.handlers)) for logger in map(logging.getLogger, _LOGGERS)]

    def restore() -> None:
        for logger, level, handlers in kept:
            logger.setLevel(level)
            logger.handlers[:] = handlers

    _undo_at_end(ctx, restore)


def common_flags(state: dict[str, bool]) -> list[Any]:
    """--quiet, --verbose, --debug: the same three on every command; none reaches the function."""

    def set_debug(value: bool) -> None:
        if value:
            state["debug"] = True

    probe = typer.Typer(add_completion=False)

    @probe.command()
    def flags(
        quiet: bool = typer.Option(
            False, "--quiet", "-q", callback=_set_quiet,
            help="Print nothing but errors and --json output.",
        ),
        verbose: bool = typer.Option(
            False, "--verbose", "-v", callback=_set_verbose, help="Also print debug logs on stderr."
        ),
        debug: bool = typer.Option(False, "--debug", callback=set_debug, help="Show tracebacks for errors."),
    ) -> None:  # fmt: skip
        """Only a holder of the three options."""

    params = typer.main.get_command(probe).params
    for param in params:
        param.expose_value = False
    return params


def apply_conventions(command: Any, flags: list[Any]) -> Any:
    """Every leaf command gets the common flags, its float options refuse nan and inf, and help renders
    as plain text: Rich markup would eat bracketed text ('[default: 1e-4]') and show flags as '<bool>'."""
    for cmd in _walk(command):
        cmd.rich_markup_mode = None
        if not hasattr(cmd, "commands"):
            names = {name for param in cmd.params for name in param.opts}
            cmd.params.extend(f for f in flags if not names & set(f.opts))
            for param in cmd.params:
                param.callback = _finite_numbers(param.callback)
    return command


def _finite_numbers(callback: Callable[..., Any] | None) -> Callable[..., Any]:
    """An option's callback that first refuses nan and inf (a float option takes them, and nan passes
    every range check: each comparison with it is false)."""

    def check(ctx: Any, param: Any, value: Any) -> Any:
        for number in value if isinstance(value, list | tuple) else [value]:
            if isinstance(number, float) and not math.isfinite(number):
                raise typer.BadParameter(f"{number} is not a finite number; pass one such as 1.5", ctx, param)
        return callback(ctx, param, value) if callback else value

    return check


def _walk(command: Any) -> Iterator[Any]:
    yield command
    for sub in getattr(command, "commands", {}).values():
        yield from _walk(sub)


class _Once(logging.Filter):
    """Lets each distinct message through once."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in self.seen:
            return False
        self.seen.add(message)
        return True


def dotenv_warnings_once() -> None:
    """Libraries a command imports read `.env` with settings classes of their own (chromadb's, ...), and
    python-dotenv warns about a line it cannot parse at every read: 7 times a command. Once is enough."""
    logger = logging.getLogger("dotenv.main")
    if not any(isinstance(f, _Once) for f in logger.filters):
        logger.addFilter(_Once())


def exit_on_usage_error(exc: Exception) -> None:
    """A usage error (typer's own or click's) is said in one line, "Invalid value for '--x': ...", and
    ends the command with its exit code; any other exception returns for the caller to report."""
    format_message = getattr(exc, "format_message", None)
    if callable(format_message):
        echo(f"error: {' '.join(str(format_message()).split())}", err=True)
        sys.exit(getattr(exc, "exit_code", 2))
