"""A command called in-process (a notebook, a test, `recreate.cli.main()`) leaves the caller's process as
it found it: --home's RECREATE_HOME, --json's stdout swap, --quiet/--verbose's log settings are undone
when the command returns, raises or fails to parse."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import recreate.cli
import tapo_backend.cli
from recreate.cli_options import apply_conventions, common_flags, emit_json, home_option, json_option

OUTCOMES = {  # the command, what follows the state-changing options, the exit code
    "returns": (["model", "status"], [], 0),
    "raises": (["experience", "show", "no-such-run"], [], 2),
    "fails to parse": (["experience", "ls"], ["--limit", "many"], 2),  # after the callbacks ran
}


def call_main(main, argv: list[str], monkeypatch) -> int:
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as done:
        main()
    return done.value.code


def process_state() -> tuple:
    loggers = [logging.getLogger(name) for name in ("recreate", "tapo_backend")]
    return (
        sys.stdout,
        os.environ.get("RECREATE_HOME"),
        [(logger.level, list(logger.handlers)) for logger in loggers],
    )


@pytest.mark.parametrize("outcome", OUTCOMES)
@pytest.mark.parametrize("home_before", [None, "caller-home"])
def test_recreate_main_restores_home_stdout_and_logging(outcome, home_before, tmp_path, monkeypatch):
    if home_before is None:
        monkeypatch.delenv("RECREATE_HOME", raising=False)
    else:
        monkeypatch.setenv("RECREATE_HOME", str(tmp_path / home_before))
    args, after, code = OUTCOMES[outcome]
    before = process_state()
    flags = ["--home", str(tmp_path / "cmd-home"), "--json", "--quiet", "--verbose"]
    argv = ["recreate", *args, *flags, *after]
    assert call_main(recreate.cli.main, argv, monkeypatch) == code
    assert process_state() == before
    assert sys.stdout is before[0]


def test_json_still_reaches_the_callers_stdout_and_twice_in_a_row(tmp_path, monkeypatch, capsys):
    for _ in range(2):
        argv = ["recreate", "model", "status", "--home", str(tmp_path), "--json"]
        assert call_main(recreate.cli.main, argv, monkeypatch) == 0
        assert json.loads(capsys.readouterr().out) == []
    print("after")  # the caller's own printing is its stdout again
    assert capsys.readouterr().out == "after\n"


def test_tapo_main_restores_logging(monkeypatch):
    before = process_state()
    argv = ["tapo", "train", "-v", "-q", "--max-steps", "x"]  # the flags ran; the count fails
    assert call_main(tapo_backend.cli.main, argv, monkeypatch) == 2
    assert process_state() == before


def test_a_subprocess_sees_the_home_while_the_command_runs(tmp_path, monkeypatch):
    """The options' own contract, through a command of their kind: the home is the environment's while the
    command runs (what it starts inherits it), and only then."""
    monkeypatch.delenv("RECREATE_HOME", raising=False)
    app = typer.Typer()

    @app.command()
    def show(home: Path = home_option(), as_json: bool = json_option()) -> None:
        seen = subprocess.run(["sh", "-c", 'printf %s "$RECREATE_HOME"'], capture_output=True, text=True)
        emit_json({"child": seen.stdout})

    cli = apply_conventions(typer.main.get_command(app), common_flags({"debug": False}))
    out = tmp_path / "out.json"
    with out.open("w") as sink:
        monkeypatch.setattr(sys, "stdout", sink)
        cli(["--home", str(tmp_path / "h"), "--json"], standalone_mode=False)
        assert sys.stdout is sink
    assert json.loads(out.read_text()) == {"child": str(tmp_path / "h")}
    assert "RECREATE_HOME" not in os.environ
