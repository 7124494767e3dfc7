"""`python -m recreate.testing`: a scripted endpoint a user starts from the shell, stopped by a signal."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import openai


def start(*args: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "recreate.testing", *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_serves_the_chosen_behaviour_until_stopped() -> None:
    server = start("--port", "0", "--model", "demo")
    try:
        banner = server.stdout.readline()
        url = banner.split(" at ", 1)[1].strip()
        assert banner.startswith("scripted endpoint (loop) at http://127.0.0.1:")
        client = openai.OpenAI(base_url=url, api_key="none")
        assert [m.id for m in client.models.list()] == ["demo"]
        tools = [{"type": "function", "function": {"name": n, "parameters": {}}} for n in ("bash", "submit")]
        reply = client.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "Task."}], tools=tools
        )
        assert reply.choices[0].message.tool_calls[0].function.name == "bash"
    finally:
        server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=20) == 0


def test_bad_options_are_one_line_and_exit_2() -> None:
    bad = start("--responder", "nonsense")
    _, err = bad.communicate(timeout=60)
    assert bad.returncode == 2 and err.count("\n") == 1 and "--responder 'nonsense'" in err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = start("--port", str(taken.getsockname()[1]))
        _, err = busy.communicate(timeout=60)
    assert busy.returncode == 2 and err.count("\n") == 1 and "pick another port" in err


def test_a_number_out_of_range_is_one_line_naming_the_option() -> None:
    """--port 99999 would bind elsewhere (the port wraps); nan would never fault or wait."""
    for option, value in (
        ("--port", "99999"),
        ("--port", "-1"),
        ("--fault-rate", "nan"),
        ("--latency", "-2"),
    ):
        bad = start(option, value)
        _, err = bad.communicate(timeout=60)
        assert bad.returncode == 2 and err.count("\n") == 1 and f"argument {option}: '{value}'" in err, err
