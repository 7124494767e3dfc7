"""What a local model server gets from us and who can read it: an allow-listed environment (a real child
dumps its own), a lifetime tied to the owning process (not to the thread that started it), and CORS
answers that never name a foreign page's origin (the real llama.cpp server, real requests)."""

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

from recreate.local.server import LocalServer, free_port, is_alive

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
