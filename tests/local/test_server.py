"""Managed local servers: start, health, found by status, stopped, and dead with a killed parent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from recreate.local import LocalModelError, find_server, local_endpoint, start_server
from recreate.local.keys import auth_headers
from recreate.local.server import LocalServer, is_alive, running_servers

pytestmark = pytest.mark.slow


def _chat(base_url: str, model: str, text: str, **extra) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 12, **extra}
    return httpx.post(
        f"{base_url}/chat/completions", json=body, headers=auth_headers(base_url), timeout=60
    ).json()


def test_embedded_server_answers_with_token_ids_and_logprobs(embedded_server):
    _, info = embedded_server
    reply = _chat(info.base_url, info.model, "What is the capital of France?", logprobs=True, temperature=0)
    content = reply["choices"][0]["logprobs"]["content"]
    assert reply["choices"][0]["message"]["content"].strip()
    assert len(content) == reply["usage"]["completion_tokens"]
    assert all(isinstance(t["id"], int) and t["logprob"] <= 0 for t in content)
    assert info.tool_calls is False  # SmolLM2's template drops tools: agents use text actions


def test_status_finds_a_running_server_and_local_endpoint_reuses_it(embedded_server):
    home, info = embedded_server
    assert [s.pid for s in running_servers(home)] == [info.pid]
    assert find_server(home, "llamacpp").base_url == info.base_url
    said: list[str] = []
    with local_endpoint(home, log=said.append) as reused:
        assert reused.pid == info.pid
    assert "already running" in said[0]
    assert is_alive(info.pid)  # a reused server is not stopped by the block that borrowed it


def test_stop_removes_the_process_and_its_state_file(local_extra, tmp_path):
    server = start_server(tmp_path, engine="llamacpp", parallel=1)
    pid, state = server.info.pid, server.state_file
    assert json.loads(state.read_text())["pid"] == pid
    server.stop()
    assert not is_alive(pid)
    assert not state.exists()
    assert running_servers(tmp_path) == []


def test_a_server_dies_with_the_process_that_started_it(local_extra, tmp_path):
    script = textwrap.dedent(f"""
        from pathlib import Path
        from recreate.local import start_server
        server = start_server(Path({str(tmp_path)!r}), engine="llamacpp", parallel=1)
        print(server.info.pid, flush=True)
        import time; time.sleep(600)
    """)
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(owner.stdout.readline())
        assert is_alive(pid)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    deadline = time.monotonic() + 5
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not is_alive(pid)
    assert running_servers(tmp_path) == []  # and status drops its stale state file


def test_a_server_that_exits_at_once_is_reported_with_its_log(tmp_path):
    server = LocalServer(
        [sys.executable, "-c", "import sys; print('boom: no such model'); sys.exit(3)"],
        engine="fake", model="m", port=1, home=tmp_path, tool_calls=False,
    )  # fmt: skip
    with pytest.raises(LocalModelError, match=r"(?s)exited with code 3.*boom: no such model"):
        server.start()
    assert not server.state_file.exists()


def test_a_bad_model_path_names_the_option(tmp_path):
    with pytest.raises(
        LocalModelError, match="^model='.*missing': not a .gguf file or an HF model dir"
    ) as caught:
        start_server(tmp_path, model=tmp_path / "missing")
    assert caught.value.for_cli().startswith(f"--model {tmp_path / 'missing'}: not a .gguf file")


def test_servers_get_no_api_keys(local_extra, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-never-in-a-server")
    server = start_server(tmp_path, engine="llamacpp", parallel=1)
    try:
        environ = Path(f"/proc/{server.info.pid}/environ").read_bytes()
    finally:
        server.stop()
    assert b"sk-test-never-in-a-server" not in environ
    assert os.environ["OPENAI_API_KEY"]  # ours is untouched


def test_a_port_in_use_is_refused_not_taken_for_the_new_server(tmp_path: Path) -> None:
    from recreate.testing import ScriptedOpenAIServer

    with ScriptedOpenAIServer() as other:  # answers /v1/models: it would pass the health check
        port = int(other.url.rsplit(":", 1)[1].split("/")[0])
        server = LocalServer(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            engine="fake", model="m", port=port, home=tmp_path, tool_calls=False,
        )  # fmt: skip
        with pytest.raises(
            LocalModelError, match=rf"port {port} on 127.0.0.1 is already in use.* port"
        ) as caught:
            server.start()
        assert "choose another --port, or leave --port out" in caught.value.for_cli()
    assert server.process is None and not server.state_file.exists()
    assert running_servers(tmp_path) == []


@pytest.mark.parametrize("port", [0, -1, 65536, 99999])
def test_a_port_that_cannot_be_bound_is_refused_naming_it(tmp_path: Path, port: int) -> None:
    """99999 was bound modulo 65536 (or failed with "bind(): port must be 0-65535") under another name."""
    with pytest.raises(
        LocalModelError, match=rf"^port {port} is not a port: pass port from 1 to 65535$"
    ) as caught:
        LocalServer(["true"], engine="fake", model="m", port=port, home=tmp_path, tool_calls=False)
    assert caught.value.for_cli().endswith("pass --port from 1 to 65535")
    assert not (tmp_path / "logs").exists()


def test_the_engine_process_refuses_a_port_out_of_range(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    argv = ["--model", str(model), "--alias", "m", "--port", "70000"]
    done = subprocess.run(
        [sys.executable, "-m", "recreate.local.llamacpp", *argv], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "--port 70000: not a port; pass one from 1 to 65535" in done.stderr
