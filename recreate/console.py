"""The Rich consoles the CLIs print with.

Rich folds output at 80 columns when it finds no terminal (a pipe, a log file, CI), which cuts
commands meant to be copied ("use it with: --model ...") and ellipsises paths and fixes in tables.
Without a terminal or COLUMNS, these consoles are wide and do not fold plain lines.

What they print is often another program's text (an evaluator's feedback, a model's reply, a task id
from a data file). A terminal obeys escape sequences in it (clear the screen, set the title, write the
clipboard), so control characters in printed text are shown as `\x1b` escapes, never sent raw.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import weakref
from collections.abc import Iterable

import click
from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment

WIDTH_WITHOUT_TERMINAL = 200
_made: weakref.WeakSet[Console] = weakref.WeakSet()
_quiet = {"on": False}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but tab and newline, DEL, C1


def printable(text: str) -> str:
    """`text` with its control characters (ESC, BEL, CR, C1 ...) written as `\\x..` escapes."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class PrintableConsole(Console):
    """A Rich console whose printed text carries no control characters; Rich's own styling and cursor
    control (segments marked as control) pass as they are."""

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control or not _CONTROL.search(segment.text):
                yield segment
            else:
                yield Segment(printable(segment.text), segment.style)


class PrintableFormatter(logging.Formatter):
    """A log formatter for terminals: the formatted record with its control characters escaped."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


def make_console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if "COLUMNS" in os.environ or _is_terminal(stream):
        console = PrintableConsole(stderr=stderr, quiet=_quiet["on"])
    else:
        wide = {"width": WIDTH_WITHOUT_TERMINAL, "soft_wrap": True}
        console = PrintableConsole(stderr=stderr, quiet=_quiet["on"], **wide)
    _made.add(console)
    return console


def set_quiet(quiet: bool) -> None:
    """`--quiet`: every console made here (before or after) prints nothing."""
    _quiet["on"] = quiet
    for console in _made:
        console.quiet = quiet


def _is_terminal(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def echo(text: str, *, err: bool = False) -> None:
    """`typer.echo` for text that may hold another program's output: control characters escaped."""
    click.echo(printable(text), err=err)
