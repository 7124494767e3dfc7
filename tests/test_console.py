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


HOSTILE = "feedback \x1b]52;c;cm0gLXJmIH4=\x07 \x1b[2J\x1b[31mred\r\x9b1m tab\there\nnext ünï"


def test_printable_escapes_every_control_character_but_tab_and_newline() -> None:
    from recreate.console import printable

    shown = printable(HOSTILE)
    assert shown == (
        "feedback \\x1b]52;c;cm0gLXJmIH4=\\x07 \\x1b[2J\\x1b[31mred\\x0d\\x9b1m tab\there\nnext ünï"
    )
    for code in [*range(0x20), *range(0x7F, 0xA0)]:
        if chr(code) not in "\t\n":
            assert chr(code) not in printable(f"a{chr(code)}b")


def test_a_console_prints_untrusted_text_visibly_and_keeps_its_own_styles() -> None:
    import io

    from recreate.console import PrintableConsole

    # styles on: Rich's own escape codes must still pass
    console = PrintableConsole(file=io.StringIO(), force_terminal=True, width=300)
    console.print(f"[red]verdict[/] {HOSTILE}", soft_wrap=True)
    console.log(HOSTILE)
    out = console.file.getvalue()
    assert "\x1b]52" not in out and "\x1b[2J" not in out and "\x07" not in out and "\x9b" not in out
    assert out.count("\\x1b") >= 6 and "cm0gLXJmIH4" in out  # shown, not obeyed
    assert "\x1b[31mverdict" in out  # the markup's colour, written by Rich


def test_log_lines_escape_control_characters() -> None:
    import logging

    from recreate.console import PrintableFormatter

    record = logging.LogRecord(
        "recreate", logging.WARNING, __file__, 1, "evaluator said %s", (HOSTILE,), None
    )
    line = PrintableFormatter("%(message)s").format(record)
    assert "\x1b" not in line and line.startswith("evaluator said feedback \\x1b]52")


def test_a_cli_shows_a_trajectory_with_escape_sequences_without_sending_them(tmp_path, monkeypatch) -> None:
    import json

    from typer.testing import CliRunner

    from recreate.experience.cli import app

    monkeypatch.setenv("RECREATE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RECREATE_EMBEDDING", "hash")
    chat = {
        "messages": [{"role": "user", "content": "say hi"}, {"role": "assistant", "content": HOSTILE}],
        "metadata": {
            "task_id": "t\x1b[8m1",
            "domain": "math",
            "score": 0.0,
            "passed": False,
            "feedback": HOSTILE,
        },
    }
    (tmp_path / "chats.jsonl").write_text(json.dumps(chat) + "\n")
    runner = CliRunner()
    assert runner.invoke(app, ["import", str(tmp_path / "chats.jsonl")]).exit_code == 0
    listed = runner.invoke(app, ["ls"]).output
    assert "task=t\\x1b[8m1 " in listed and "\x1b" not in listed
    trajectory_id = next(line.split()[0] for line in listed.splitlines() if "task=" in line)
    shown = runner.invoke(app, ["show", trajectory_id]).output
    assert "task t\\x1b[8m1 " in shown and "\x1b" not in shown
