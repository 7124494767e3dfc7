import os
import subprocess
import sys

LONG = "use it with: --model local@http://127.0.0.1:8080/v1 " + "x" * 150

PRINT_LONG = f"from recreate.console import make_console; make_console().print({LONG!r})"


def run_piped(env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PRINT_LONG],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    return result.stdout


def test_output_to_a_pipe_is_not_folded_at_80_columns() -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    assert run_piped(env).splitlines() == [LONG]


def test_columns_set_by_the_user_are_honoured() -> None:
    env = {**os.environ, "COLUMNS": "80"}
    lines = run_piped(env).splitlines()
    assert len(lines) > 1 and max(len(line) for line in lines) <= 80
