"""`recreate ui` as a user starts it: bound to 127.0.0.1, serving the home; a bad --home is one line."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx

from tests.ui.conftest import UiHome


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ui_command_serves_the_home_on_localhost_only(ui_home: UiHome):
    port = _free_port()
    cmd = [sys.executable, "-m", "recreate", "ui", "--home", str(ui_home.path), "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                reply = httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "recreate ui did not start"
                time.sleep(0.2)
        assert reply.status_code == 200 and ui_home.run_id in reply.text
        listening = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout
        local_addresses = [line.split()[3] for line in listening.splitlines()]
        assert local_addresses == [f"127.0.0.1:{port}"]
    finally:
        proc.terminate()
        out = proc.communicate(timeout=10)[0]
    assert f"http://127.0.0.1:{port}/" in out and "read-only" in out


def test_a_home_that_is_not_there_is_one_line(tmp_path):
    missing = tmp_path / "nowhere"
    done = subprocess.run(
        [sys.executable, "-m", "recreate", "ui", "--home", str(missing)], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: Invalid value: {missing} is not a directory: pass --home DIR (a recreate home)"
    ]
