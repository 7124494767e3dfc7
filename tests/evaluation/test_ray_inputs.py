"""Choosing the executor, and what holds without a cluster: a bad --executor, a cluster nobody answers
at and a failed start are one line at once; what the local Ray started dies with a driver killed by
SIGKILL; a failed rollout logs no secret (Ray keeps worker logs on disk)."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recreate.cli import main
from recreate.domains import get_domain
from recreate.errors import ArgumentError
from recreate.evaluation import Rollouts
from recreate.evaluation.ray_executor import RayExecutor, make_executor
from tests.conftest import FAKE_KEY
from tests.evaluation.conftest import EVALUATOR, EXAMPLE, MINIMAL, write_tasks


@pytest.mark.parametrize(
    "spec", ["dask", "ray:", "ray://", "ray://host", "ray://host:x", "ray://:10001", "ray://h:1/x", "RAY"]
)
def test_a_bad_executor_is_one_line_naming_the_option(spec, monkeypatch, capsys, recreate_home, tmp_path):
    with pytest.raises(ArgumentError, match="is no executor; use threads"):
        make_executor(spec)
    data = write_tasks(tmp_path / "tasks.jsonl", 1)
    argv = ["recreate", "eval", "--scaffold", str(MINIMAL), "--domain", "jsonl", "--data", str(data),
            "--executor", spec]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.startswith(f"error: --executor {spec} is no executor")
    assert err.count("\n") == 1


def test_executor_spellings(monkeypatch):
    assert make_executor(None) is None and make_executor("threads") is None
    with socket.create_server(("127.0.0.1", 0)) as listening:  # a cluster's client port answers
        address = f"ray://127.0.0.1:{listening.getsockname()[1]}"
        local, remote = make_executor("ray", concurrency=8), make_executor(address)
    assert isinstance(local, RayExecutor) and local.address is None and local.num_cpus == 8
    assert isinstance(remote, RayExecutor) and remote.address == address
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ArgumentError, match=r"Ray is not installed here; `pip install 'recreate\[ray\]'`"):
        make_executor("ray")


@given(st.text(max_size=30))
def test_any_executor_text_is_an_executor_or_one_argument_error(spec):
    try:
        made = make_executor(spec)
    except ArgumentError as exc:
        assert "\n" not in str(exc)
    else:
        assert made is None or isinstance(made, RayExecutor)


_DRIVER = """
import os, signal, subprocess, sys, time
from recreate.evaluation.ray_reaper import reaped_with_this_process
quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "start_new_session": True}
with reaped_with_this_process():  # like Ray's processes: one that lingers, one that starts more later
    subprocess.Popen(["sh", "-c", "sleep 300 & echo $! > early; sleep 300"], **quiet)
    subprocess.Popen(["sh", "-c", "sleep 0.5; sleep 300 & echo $! > late; wait"], **quiet)
own = subprocess.Popen(["sleep", "300"], **quiet)  # started after: not Ray's
while not os.path.exists("late"):
    time.sleep(0.05)
print(own.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="Linux /proc")
def test_what_ray_started_dies_with_a_driver_killed_by_sigkill(tmp_path):
    import subprocess

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    done = subprocess.run([sys.executable, "-c", _DRIVER], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr
    own = int(done.stdout)
    strays = [int((tmp_path / name).read_text()) for name in ("early", "late")]
    deadline = time.monotonic() + 10
    while any(map(_alive, strays)) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        assert not [pid for pid in strays if _alive(pid)], "processes started for Ray outlived the driver"
        assert _alive(own), "a process the driver started outside Ray was killed"
    finally:
        for pid in [own, *strays]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_cluster_nobody_answers_at_is_one_line_at_once(monkeypatch, capsys, recreate_home, tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as closed:
        address = f"ray://127.0.0.1:{closed.getsockname()[1]}"
    data = write_tasks(tmp_path / "tasks.jsonl", 1)
    argv = ["recreate", "eval", "--scaffold", str(MINIMAL), "--domain", "jsonl", "--data", str(data),
            "--executor", address]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    started = time.monotonic()
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    assert time.monotonic() - started < 10  # Ray's client alone tries for ~30 s
    assert done.value.code == 2 and err.startswith(f"error: --executor {address}: nothing answers at")
    assert err.count("\n") == 1 and "ray start --head" in err


def test_a_failed_start_is_told_to_every_waiting_rollout_not_tried_again(monkeypatch):
    import ray

    executor, tries = RayExecutor("ray://127.0.0.1:1"), []

    def fails(ray_module):
        tries.append(1)
        time.sleep(0.2)  # the others wait on the lock meanwhile
        raise RuntimeError("cannot join the Ray cluster at ray://127.0.0.1:1 (ConnectionError)")

    monkeypatch.setattr(executor, "_init", fails)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    errors: list[str] = []

    def rollout() -> None:
        try:
            executor.connect()
        except RuntimeError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=rollout) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(tries) == 1 and len(errors) == 4 and len(set(errors)) == 1


def test_no_key_in_what_a_failed_rollout_logs(openai_server, caplog, tmp_path):
    """Ray keeps a worker's log on disk: what a rollout logs about an error shows no secret in it."""

    class Leaky:  # a sandbox whose open fails with a key in its error (a URL, a header dump)
        name = "leaky"

        def open(self, spec=None):
            raise RuntimeError(f"cannot reach https://api.example/v1?api_key={FAKE_KEY}")

        def available(self):
            return True, ""

    data = write_tasks(tmp_path / "tasks.jsonl", 1)
    domain = get_domain("jsonl", data=data, evaluator=EVALUATOR, evaluator_dir=EXAMPLE)
    model = f"scripted@{openai_server.url}"
    rollouts = Rollouts(MINIMAL, domain, model=model, sandbox=Leaky(), cache=False)
    with caplog.at_level("WARNING"):
        rollouts.run(domain.tasks("all")[0])
    assert "failed before the agent could finish" in caplog.text and FAKE_KEY not in caplog.text
