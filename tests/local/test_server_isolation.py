"""What a local model server gets from us and who can read it: an allow-listed environment (a real child
dumps its own), a lifetime tied to the owning process (not to the thread that started it), and CORS
answers that never name a foreign page's origin (the real llama.cpp server, real requests); a key of its own
that only our clients find (a web page that reaches 127.0.0.1 is refused)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from recreate.local.keys import HOMES_ENV, KEY_ENV, auth_headers, server_key
from recreate.local.server import LocalServer, free_port, healthy, is_alive, running_servers, state_path

# a stand-in server: writes its environment to a file, answers /v1/models
FAKE_SERVER = textwrap.dedent("""
    import json, os, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    with open(sys.argv[2], "w") as f:
        json.dump(dict(os.environ), f)
    class Models(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b'{"data": []}')
        def log_message(self, *args):
            pass
    HTTPServer(("127.0.0.1", int(sys.argv[1])), Models).serve_forever()
""")
LEAKS = {
    "DATABASE_URL": "postgres://u:pw@db/x",
    "MY_CREDENTIALS": "c",
    "GH_PAT": "p",
    "OPENAI_API_KEY": "k",
    "VLLM_API_KEY": "k",
    "AWS_SECRET_ACCESS_KEY": "s",
    "SOME_RANDOM_SETTING": "r",
}
KEPT = {"OMP_NUM_THREADS": "1", "LC_ALL": "C.UTF-8", "HF_HUB_OFFLINE": "1", "TMPDIR": "/tmp"}


def _fake(home: Path, dump: Path, **options) -> LocalServer:
    port = free_port()
    command = [sys.executable, "-c", FAKE_SERVER, str(port), str(dump)]
    return LocalServer(command, engine="fake", model="m", port=port, home=home, tool_calls=False, **options)


def test_the_server_gets_an_allow_listed_environment(tmp_path, monkeypatch):
    for name, value in {**LEAKS, **KEPT}.items():
        monkeypatch.setenv(name, value)
    dump = tmp_path / "env.json"
    with _fake(tmp_path, dump, env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}):
        seen = json.loads(dump.read_text())
    assert not set(LEAKS) & set(seen), sorted(set(LEAKS) & set(seen))
    assert all(seen[name] == value for name, value in KEPT.items())
    assert seen["PATH"] == os.environ["PATH"] and seen["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"


def test_a_server_outlives_the_thread_that_started_it_and_dies_with_its_process(tmp_path):
    owner_script = textwrap.dedent(f"""
        import sys, threading, time
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        from tests.local.test_server_isolation import _fake
        started = []
        worker = threading.Thread(target=lambda: started.append(_fake(Path({str(tmp_path)!r}),
                                  Path({str(tmp_path / "env.json")!r})).start()))
        worker.start(); worker.join()  # the starting thread is gone
        print(started[0].pid, flush=True)
        time.sleep(600)
    """)
    owner = subprocess.Popen([sys.executable, "-c", owner_script], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(owner.stdout.readline())
        time.sleep(1.0)
        assert is_alive(pid)  # not killed when its starting thread ended
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    deadline = time.monotonic() + 5
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not is_alive(pid)  # killed with its process


@pytest.mark.slow
def test_llamacpp_cors_never_names_a_foreign_origin(embedded_server):
    _, info = embedded_server
    own = info.base_url.removesuffix("/v1")
    for origin in ("http://evil.example", "http://127.0.0.1.evil.example", "null"):
        get = httpx.get(f"{info.base_url}/models", headers={"Origin": origin}, timeout=10)
        preflight = httpx.options(
            f"{info.base_url}/chat/completions",
            headers={"Origin": origin, "Access-Control-Request-Method": "POST"},
            timeout=10,
        )
        for reply in (get, preflight):
            allowed = reply.headers.get("access-control-allow-origin")
            assert allowed in (None, own), (origin, allowed)
            assert reply.headers.get("access-control-allow-credentials") != "true"


# a stand-in for vLLM behind our real guard (served by uvicorn, as vLLM is): its routes answer anyone
KEYED_SERVER = textwrap.dedent("""
    import json, sys
    import uvicorn
    sys.path.insert(0, sys.argv[2])
    from recreate_guard import Guard

    CHAT = {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hello"}}]}
    MODELS = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "vllm"}]}

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        body = MODELS if scope["method"] == "GET" else CHAT
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})

    uvicorn.run(Guard(app), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
""")
GUARDED_ROUTES = ("/v1/chat/completions", "/invocations", "/v1/load_lora_adapter", "/adapters", "/tokenize")


def keyed_command(port: int) -> list[str]:
    from recreate.local.vllm import GUARD_DIR

    pytest.importorskip("uvicorn")
    return [sys.executable, "-c", KEYED_SERVER, str(port), str(GUARD_DIR)]


def _keyed(home: Path) -> LocalServer:
    port = free_port()
    return LocalServer(keyed_command(port), engine="fake", model="m", port=port, home=home, tool_calls=False)


def test_each_server_gets_a_key_of_its_own_in_place_of_any_of_ours(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "the-users-own")
    keys = []
    for run in range(2):
        dump = tmp_path / f"{run}.json"
        with _fake(tmp_path, dump) as info:
            keys.append(info.api_key)
            assert json.loads(dump.read_text())[KEY_ENV] == info.api_key
    assert keys[0] != keys[1] and "the-users-own" not in keys and min(map(len, keys)) >= 32


def test_our_clients_find_the_key_and_nobody_else_is_answered(tmp_path, monkeypatch):
    from recreate.local.vllm import load_adapter, served_model
    from recreate.models import make_chat_model

    monkeypatch.setenv("OPENAI_API_KEY", "sk-a-hosted-key")  # never what a local server is sent
    with _keyed(tmp_path) as info:
        root = info.base_url.removesuffix("/v1")
        for route in ("/v1/models", *GUARDED_ROUTES):
            for headers in ({}, {"Authorization": "Bearer sk-a-hosted-key"}, {"Content-Type": "text/plain"}):
                assert httpx.post(root + route, headers=headers, content="{}").status_code == 401, route
            rebound = {"Host": "evil.example", "Authorization": f"Bearer {info.api_key}"}
            assert httpx.post(root + route, headers=rebound, content="{}").status_code == 421, route
        assert httpx.get(root + "/health").status_code == 200
        assert healthy(info.base_url)
        chat = make_chat_model(info.spec, max_retries=0)
        assert chat.invoke("hi").content == "hello"
        assert served_model(chat) is not None  # vLLM recognized: it answered the listing with the key
        adapter = tmp_path / "adapter"
        adapter.mkdir()
        (adapter / "adapter_config.json").write_text(json.dumps({"r": 8}))
        assert load_adapter(info.base_url, "policy-1", adapter) == "policy-1"
        # the key goes only to the address the server bound: [::1] or a name may be someone else's
        for elsewhere in ("localhost", "[::1]"):
            assert server_key(info.base_url.replace("127.0.0.1", elsewhere)) is None


def test_another_process_finds_the_key_in_the_state_file_only_its_user_can_read(tmp_path):
    with _keyed(tmp_path) as info:
        state = state_path(tmp_path, "fake", info.port)
        assert stat.S_IMODE(state.stat().st_mode) == 0o600
        assert info.api_key not in repr(info) and "api_key" not in info.public()
        probe = "import sys; from recreate.local.keys import server_key; print(server_key(sys.argv[1]))"

        def found(home: Path, **more: str) -> str:
            env = {k: v for k, v in os.environ.items() if k != HOMES_ENV}
            env |= {"RECREATE_HOME": str(home), **more}
            done = subprocess.run(
                [sys.executable, "-c", probe, info.base_url],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            return done.stdout.strip()

        assert found(tmp_path) == info.api_key
        assert found(tmp_path / "another-home") == "None"
        # a process this one starts from now on is told the home (a path, not the key)
        assert os.environ[HOMES_ENV] and info.api_key not in os.environ[HOMES_ENV]
        assert found(tmp_path / "another-home", **{HOMES_ENV: os.environ[HOMES_ENV]}) == info.api_key
    assert server_key(info.base_url) is None  # stopped: forgotten


def test_keys_go_only_to_the_servers_they_belong_to(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for url in ("http://127.0.0.1:1/v1", "https://api.example.com/v1", "http://10.0.0.2:8000/v1"):
        assert server_key(url) is None and auth_headers(url) == {}
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert auth_headers("https://api.example.com/v1") == {"Authorization": "Bearer sk-x"}


def test_model_status_hides_the_key_and_model_key_prints_it(tmp_path):
    from typer.testing import CliRunner

    from recreate.local.cli import app

    runner = CliRunner()
    assert runner.invoke(app, ["key", "--home", str(tmp_path)]).exit_code == 2  # none runs
    with _keyed(tmp_path) as info:
        status = runner.invoke(app, ["status", "--home", str(tmp_path), "--json"])
        assert status.exit_code == 0 and info.api_key not in status.output
        assert json.loads(status.output)[0]["answers"] is True  # asked with the key
        key = runner.invoke(app, ["key", "--home", str(tmp_path), "--port", str(info.port)])
        assert key.exit_code == 0 and key.output.strip() == info.api_key
        other = runner.invoke(app, ["key", "--home", str(tmp_path), "--port", str(free_port())])
        assert other.exit_code == 2 and "--port" in other.output


@pytest.mark.slow
def test_llamacpp_answers_only_requests_that_carry_its_key(embedded_server):
    _, info = embedded_server
    root = info.base_url.removesuffix("/v1")
    body = {"model": info.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Host": "evil.example"}):
        assert httpx.post(f"{info.base_url}/chat/completions", json=body, headers=headers).status_code == 401
        assert httpx.post(f"{root}/completion", json={"prompt": "hi"}, headers=headers).status_code == 401
    assert httpx.get(f"{root}/slots").status_code == 401
    own = httpx.post(f"{info.base_url}/chat/completions", json=body, headers=auth_headers(info.base_url))
    assert own.status_code == 200


def test_a_server_another_process_started_is_reached_once_found_in_its_home(tmp_path, monkeypatch):
    from recreate.local import find_server
    from recreate.local.server import stop_server
    from recreate.models import make_chat_model

    monkeypatch.delenv("RECREATE_HOME", raising=False)  # the state file is not under the default home
    start = textwrap.dedent("""
        import json, sys
        from pathlib import Path
        from recreate.local.server import LocalServer, free_port
        port = free_port()
        command = [arg.replace("PORT", str(port)) for arg in json.loads(sys.argv[2])]
        LocalServer(command, engine="fake", model="m", port=port, home=Path(sys.argv[1]), tool_calls=False,
                    detach=True).start()
    """)
    command = json.dumps([arg if arg != "0" else "PORT" for arg in keyed_command(0)])
    subprocess.run([sys.executable, "-c", start, str(tmp_path), command], check=True, timeout=120)
    (info,) = running_servers(tmp_path)
    try:
        assert server_key(info.base_url) is None  # nothing tells this process yet
        assert find_server(tmp_path) == info
        assert make_chat_model(info.spec, max_retries=0).invoke("hi").content == "hello"
    finally:
        stop_server(tmp_path, info)


def test_looking_for_a_key_never_removes_a_state_file(tmp_path):
    from recreate.local.server import ServerInfo, servers_dir

    servers_dir(tmp_path).mkdir(parents=True)
    dead = ServerInfo("fake", "m", "http://127.0.0.1:9/v1", 2**22 + 17, "log", False, api_key="k" * 32)
    files = {"fake-9.json": json.dumps(dataclasses.asdict(dead)), "fake-10.json": "{damaged"}
    for name, text in files.items():
        (servers_dir(tmp_path) / name).write_text(text)
    assert server_key("http://127.0.0.1:9/v1", home=tmp_path) is None  # its process is not alive
    assert sorted(p.name for p in servers_dir(tmp_path).iterdir()) == sorted(files)
    assert running_servers(tmp_path) == [] and not any(servers_dir(tmp_path).iterdir())  # status prunes
