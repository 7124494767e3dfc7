"""The Rich consoles the CLIs print with.

Rich folds output at 80 columns when it finds no terminal (a pipe, a log file, CI), which cuts
commands meant to be copied ("use it with: --model ...") and ellipsises paths and fixes in tables.
Without a terminal or COLUMNS, these consoles are wide and do not fold plain lines.
"""

from __future__ import annotations

import os
import sys
import weakref

from rich.console import Console

WIDTH_WITHOUT_TERMINAL = 200
_made: weakref.WeakSet[Console] = weakref.WeakSet()
_quiet = {"on": False}


def make_console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if "COLUMNS" in os.environ or _is_terminal(stream):
        console = Console(stderr=stderr, quiet=_quiet["on"])
    else:
        console = Console(stderr=stderr, width=WIDTH_WITHOUT_TERMINAL, soft_wrap=True, quiet=_quiet["on"])
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
