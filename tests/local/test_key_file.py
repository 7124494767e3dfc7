"""A key of the user's own for a local server (`--key-file`): kept across restarts for clients other
than ours, refused in one line when the file cannot serve as one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from recreate.errors import ArgumentError
from recreate.local.keys import read_key_file, server_key
from recreate.local.server import LocalServer, free_port, running_servers
from tests.local.test_server_isolation import GUARDED_ROUTES, keyed_command

KEY = "k3y-Of_the.users~own-0123456789"


def _key_file(tmp_path: Path, text: str = KEY + "\n", mode: int = 0o600) -> Path:
    path = tmp_path / "server.key"
    path.write_text(text)
    path.chmod(mode)
    return path


def _answers(base_url: str, key: str | None) -> list[int]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    root = base_url.removesuffix("/v1")
    return [httpx.post(root + r, json={}, headers=headers, timeout=10).status_code for r in GUARDED_ROUTES]


def test_the_key_is_the_files_only_line(tmp_path):
    assert read_key_file(_key_file(tmp_path)) == KEY
    assert read_key_file(_key_file(tmp_path, f"  {KEY}\r\n\n", 0o400)) == KEY


@pytest.mark.parametrize(
    ("text", "mode", "said"),
    [
        (KEY, 0o644, "chmod 600"),
        (KEY, 0o620, "chmod 600"),
        ("", 0o600, "no usable key"),
        ("short-key", 0o600, "no usable key"),
        ("a key with blanks in it, long enough", 0o600, "no usable key"),
        (f"{KEY}\n{KEY}\n", 0o600, "no usable key"),
        ("ключ-которого-нет-в-ascii-0123", 0o600, "no usable key"),
    ],
)
def test_a_file_that_cannot_serve_as_a_key_is_refused_naming_the_option(tmp_path, text, mode, said):
    path = _key_file(tmp_path, text, mode)
    with pytest.raises(ArgumentError) as error:
        read_key_file(path)
    message = error.value.for_cli()
    assert message.startswith("--key-file: ") and str(path) in message and said in message
    assert str(error.value).startswith("key_file: ")
    assert KEY not in message


def test_a_missing_or_unreadable_file_says_how_to_write_one(tmp_path):
    for path in (tmp_path / "absent.key", tmp_path):
        with pytest.raises(ArgumentError, match="cannot be read") as error:
            read_key_file(path)
        assert "secrets.token_urlsafe" in str(error.value) and "chmod 600" in str(error.value)
    binary = tmp_path / "binary.key"
    binary.write_bytes(b"\xff\xfe" * 20)
    binary.chmod(0o600)
    with pytest.raises(ArgumentError, match="cannot be read"):
        read_key_file(binary)


def test_a_server_given_a_key_requires_that_key_at_every_start(tmp_path):
    for _ in range(2):  # a restart: the same key, so other clients keep theirs
        port = free_port()
        server = LocalServer(
            keyed_command(port), engine="fake", model="m", port=port, home=tmp_path, tool_calls=False, key=KEY
        )
        with server as info:
            assert info.api_key == KEY and server_key(info.base_url) == KEY  # our clients find it too
            assert set(_answers(info.base_url, None)) == {401}
            assert set(_answers(info.base_url, "wrong-" + KEY)) == {401}
            assert set(_answers(info.base_url, KEY)) == {200}


def test_model_serve_refuses_a_bad_key_file_before_anything_starts(tmp_path):
    from recreate.local.cli import app

    path = _key_file(tmp_path, mode=0o644)
    done = CliRunner().invoke(app, ["serve", "--key-file", str(path), "--home", str(tmp_path / "home")])
    assert done.exit_code != 0 and isinstance(done.exception, ArgumentError)
    assert done.exception.for_cli().startswith("--key-file: ")
    assert not (tmp_path / "home" / "servers").exists() or not any((tmp_path / "home" / "servers").iterdir())


FAKE_VLLM_PYTHON = """#!/bin/sh
# stands in for `python -m vllm.entrypoints.openai.api_server ... --port PORT ...`: the guarded stand-in
port=""
while [ $# -gt 0 ]; do [ "$1" = "--port" ] && port="$2"; shift; done
exec {python} {server} "$port" {guard_dir}
"""


def _fake_vllm_python(tmp_path: Path) -> Path:
    """A `--python` for tapo serve that starts the guarded stand-in (the server's environment is an
    allow-list: the stand-in's code goes in a file)."""
    _, _, code, _, guard_dir = keyed_command(0)
    server = tmp_path / "stand_in.py"
    server.write_text(code)
    script = tmp_path / "python"
    script.write_text(FAKE_VLLM_PYTHON.format(python=sys.executable, server=server, guard_dir=guard_dir))
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("keyed", [True, False])
def test_tapo_serve_with_a_key_file_requires_its_key_and_logs_under_the_home(tmp_path, keyed):
    port = free_port()
    tapo = [sys.executable, "-m", "tapo_backend.cli", "serve", "m", "--port", str(port)]
    given = ["--python", str(_fake_vllm_python(tmp_path))]
    given += ["--key-file", str(_key_file(tmp_path))] if keyed else []
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RECREATE_HOME": str(tmp_path / "home")}
    (cwd := tmp_path / "cwd").mkdir()
    process = subprocess.Popen(
        [*tapo, *given], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline, said = time.monotonic() + 120, []
        while "ready at" not in (line := process.stdout.readline().decode()):  # type: ignore[union-attr]
            said.append(line)
            assert line and time.monotonic() < deadline, f"tapo serve ended before it was ready: {said}"
        base_url = f"http://127.0.0.1:{port}/v1"
        if keyed:
            assert "clients give the key in" in line and KEY not in line
            assert set(_answers(base_url, None)) == {401} and set(_answers(base_url, KEY)) == {200}
        else:
            assert set(_answers(base_url, None)) == {200}
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
    assert not any(cwd.iterdir())  # its log went to the home
    assert (tmp_path / "home" / "logs" / f"vllm-{port}.log").is_file()


def test_tapo_serve_prints_a_command_that_reads_the_key_from_its_file(tmp_path):
    path = _key_file(tmp_path)
    tapo = [sys.executable, "-m", "tapo_backend.cli", "serve", "m"]
    done = subprocess.run(
        [*tapo, "--key-file", str(path), "--print-command"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and KEY not in done.stdout
    assert f'RECREATE_SERVER_KEY="$(cat {path})"' in done.stdout
    missing = [*tapo, "--key-file", str(tmp_path / "none"), "--print-command"]
    bad = subprocess.run(missing, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --key-file: ")
    assert len(bad.stderr.splitlines()) == 1


@pytest.mark.slow
def test_model_serve_with_a_key_file_on_the_real_llamacpp(tmp_path):
    from recreate.local.cli import app
    from tests.conftest import require_local_extra

    require_local_extra()
    home, runner = tmp_path / "home", CliRunner()
    path = _key_file(tmp_path)
    served = runner.invoke(app, ["serve", "--detach", "--key-file", str(path), "--home", str(home)])
    try:
        assert served.exit_code == 0, served.output
        assert f"OPENAI_API_KEY=$(cat {path})" in served.output and KEY not in served.output
        assert runner.invoke(app, ["key", "--home", str(home)]).output.strip() == KEY
        (other := tmp_path / "other").mkdir()
        another = _key_file(other, "x" * 40)
        again = runner.invoke(app, ["serve", "--key-file", str(another), "--home", str(home)])
        assert again.exit_code != 0 and "requires another key" in again.output
        same = runner.invoke(app, ["serve", "--key-file", str(path), "--home", str(home)])
        assert same.exit_code == 0 and "already running" in same.output
        (info,) = running_servers(home)
        body = {"model": info.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        for key, status in ((None, 401), (KEY, 200)):
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            reply = httpx.post(f"{info.base_url}/chat/completions", json=body, headers=headers, timeout=60)
            assert reply.status_code == status
    finally:
        runner.invoke(app, ["stop", "--home", str(home)])
