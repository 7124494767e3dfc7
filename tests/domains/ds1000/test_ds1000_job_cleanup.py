"""The DS-1000 checker server leaves nothing of a job running once the job has ended: what a problem's
check started (a helper that ignores SIGTERM/SIGALRM and sleeps) dies with it, while the server
goes on serving. Runs the server as the checker sandbox runs it (`python -I check.py`), on the host."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from recreate.domains.ds1000.judge import checker_files
from tests.sandbox.conftest import host_processes

LEAKY_CONTEXT = """
import os, signal, time
if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    os.execv("/bin/sleep", ["sleep", "4901"])
raise RuntimeError("the check fails at once, leaving its helper behind")
"""


def _wait(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_finished_job_leaves_no_process_behind(tmp_path: Path) -> None:
    for name, data in checker_files().items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    (tmp_path / "config.json").write_text(json.dumps({"modules": [], "timeout": 30}))
    server = subprocess.Popen([sys.executable, "-I", "check.py"], cwd=tmp_path)
    try:
        assert _wait((tmp_path / "server.ready").exists, 30)
        job = tmp_path / "jobs" / "leaky"
        job.mkdir()
        (job / "problem.json").write_text(json.dumps({"code_context": LEAKY_CONTEXT, "solution": ""}))
        (tmp_path / "jobs" / "leaky.job").write_text("")
        assert _wait((job / "verdict.json").exists, 30)
        assert json.loads((job / "verdict.json").read_text())["passed"] is False
        assert _wait(lambda: host_processes("sleep 4901") == [], 10)
        assert server.poll() is None
    finally:
        (tmp_path / "stop").write_text("")
        server.wait(timeout=30)
