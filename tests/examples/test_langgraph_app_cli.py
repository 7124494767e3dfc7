"""examples/langgraph_app/app.py as a user runs it: an answer on stdout, or one line naming the fix
(exit code 2, no traceback unless --debug), before anything is written when no model is set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from recreate.testing import text

APP = Path(__file__).resolve().parents[2] / "examples" / "langgraph_app" / "app.py"


def run_app(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RECREATE_", "OPENAI_"))}
    full = {**base, "RECREATE_HOME": str(cwd / "home"), "RECREATE_CONFIG": str(cwd / "none.toml"), **env}
    return subprocess.run(
        [sys.executable, str(APP), "What is 2+2?", *args],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_no_model_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    done = run_app(tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: no model") and "RECREATE_MODEL" in line and "--model" in line
    assert list(tmp_path.iterdir()) == []  # no app.sqlite, no home
    debug = run_app(tmp_path, "--debug")
    assert debug.returncode != 0 and "Traceback" in debug.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--model", "scripted@http://127.0.0.1:9/v1", "--scaffold", "no/such/scaffold"), "no/such/scaffold"),
        (("--model", "openai:gpt-x"), "OPENAI_API_KEY"),  # a provider without its key
    ],
)
def test_other_bad_input_is_one_line(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    done = run_app(tmp_path, *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: ") and says in line


def test_the_model_from_the_environment_answers(tmp_path: Path, openai_server) -> None:
    openai_server.enqueue(text("chat"), text("4"))  # the router, then the chat model
    done = run_app(tmp_path, "--sandbox", "local", RECREATE_MODEL=f"scripted@{openai_server.url}")
    assert (done.returncode, done.stdout) == (0, "4\n"), done.stderr
    assert (tmp_path / "app.sqlite").is_file()
