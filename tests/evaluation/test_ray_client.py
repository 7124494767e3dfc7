"""`--executor ray://HOST:PORT` against a real Ray cluster: a head started for the module as a user starts
one (`ray start --head --block`, 127.0.0.1, 2 CPUs, token authentication, its own HOME and temp dir, in
its own session, killed with all it started at the end), joined through its client port by
`recreate eval` processes. The drivers are processes of their own: each gets exactly the Ray settings a
user's shell would give it (Ray reads them once per process, and a process joins one Ray at a time), and
this process's Ray (test_ray_executor.py's local cluster) is never touched. The same scores per task and
seed as threads, the driver alone keeping trajectories and cache; a driver without the cluster's token
is one line naming --executor and the fix, at once (Ray's client retries for ~30 s)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.evaluation import Rollouts
from tests.conftest import FAKE_KEY
from tests.evaluation.conftest import EVALUATOR, EXAMPLE, MINIMAL, solver, write_tasks
from tests.evaluation.test_ray_executor import _sampled, needs_ray

BIN = Path(sys.executable).parent
RAY_SETTINGS = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
START_TIMEOUT_S = 60


@dataclass(frozen=True)
class Head:
    address: str  # ray://127.0.0.1:PORT
    token_file: Path  # the cluster's token, where `ray start` found it (its HOME's ~/.ray/auth_token)
    home: Path


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _carrying(marker: str) -> list[int]:
    """The live processes whose environment holds `marker` (every process a head starts inherits it,
    whatever session or title it gives itself)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            carries = proc.name.isdigit() and marker.encode() in (proc / "environ").read_bytes()
            if carries and (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(proc.name))
        except OSError:
            continue  # gone, or not ours to read
    return found


def _started(process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while "Ray runtime started" not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the Ray head did not start: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.2)


def _stop(process: subprocess.Popen, marker: str) -> None:
    """SIGTERM to the head's process group, SIGKILL after a moment; then nothing of it may be left."""
    os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=2)
    with contextlib.suppress(ProcessLookupError):  # all gone already
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 10
    while _carrying(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _carrying(marker)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes of the Ray head outlived it: {left}"


@pytest.fixture(scope="module")
def head() -> Iterator[Head]:
    """A Ray head on 127.0.0.1 with token authentication, its workers holding a fake API key."""
    root = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))  # short: Ray's socket paths have a length cap
    token_file = root / "home" / ".ray" / "auth_token"
    token_file.parent.mkdir(parents=True)
    token_file.write_text(secrets.token_hex(32))  # what `ray get-auth-token --generate` writes
    marker = f"recreate-test-head-{uuid.uuid4().hex}"
    env = {k: v for k, v in os.environ.items() if k not in RAY_SETTINGS}
    env |= {"HOME": str(root / "home"), "RAY_AUTH_MODE": "token", "OPENAI_API_KEY": FAKE_KEY,
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RECREATE_TEST_HEAD": marker,
            # the head starts a client server for each driver, and one was seen never to answer (or to
            # refuse the token it was given): the join fails after this long, and the driver tries again
            "RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S": "20"}  # fmt: skip
    client = _free_port()
    command = [str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
               f"--port={_free_port()}", f"--ray-client-server-port={client}", "--num-cpus=2",
               "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={root}/ray"]  # fmt: skip
    log = root / "head.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _started(process, log)
        yield Head(f"ray://127.0.0.1:{client}", token_file, root / "home")
    finally:
        _stop(process, marker)
        shutil.rmtree(root, ignore_errors=True)


def _client_server_logs(head: Head) -> str:
    """The tails of the head's client-server logs, for a failed join."""
    logs = sorted(head.home.parent.glob("ray/session_*/logs/ray_client_server*"))
    return "".join(f"\n--- {log.name}:\n{log.read_text(errors='replace')[-1500:]}" for log in logs)


def _eval(
    head: Head, tmp_path: Path, data: Path, url: str, **ray_settings: str
) -> subprocess.CompletedProcess[str]:
    """`recreate eval` on the cluster, in a process whose Ray settings are `ray_settings` alone, with a
    HOME of its own (no ~/.ray/auth_token) and no API key (the workers read theirs on the head)."""
    home = tmp_path / "driver-home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in (*RAY_SETTINGS, "OPENAI_API_KEY")}
    env |= {"HOME": str(home), **ray_settings}
    argv = [str(BIN / "recreate"), "eval", "--scaffold", str(MINIMAL), "--domain", "jsonl", "--data",
            str(data), "--split", "all", "--seeds", "2", "--concurrency", "2", "--model", f"scripted@{url}",
            "--evaluator", EVALUATOR, "-o", f"evaluator_dir={EXAMPLE}", "--sandbox", "bwrap",
            "--no-progress", "--executor", head.address, "--run", "on-cluster"]  # fmt: skip
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@needs_ray
@pytest.mark.bwrap
def test_a_driver_with_the_clusters_token_gets_the_scores_of_threads(
    head, openai_server, bwrap, recreate_home, tmp_path
):
    data = write_tasks(tmp_path / "tasks.jsonl", 2)
    domain = get_domain("jsonl", data=data, evaluator=EVALUATOR, evaluator_dir=EXAMPLE)
    openai_server.responder = solver(wrong={"add_1"})
    rollouts = Rollouts(MINIMAL, domain, model=f"scripted@{openai_server.url}", sandbox="bwrap", cache=False)
    threads = rollouts.run_many(domain.tasks("all"), seeds=(0, 1), concurrency=2, progress=False)
    by_threads = len(openai_server.requests)

    token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(head.token_file)}
    done = _eval(head, tmp_path, data, openai_server.url, **token)
    assert done.returncode == 0, done.stderr[-3000:]
    out = recreate_home / "evals" / "on-cluster"
    results = json.loads((out / "results.json").read_text())
    on_cluster = {(row["task_id"], row["seed"]): row["score"] for row in results["tasks"]}
    assert on_cluster == {(t.task_id, t.seed): t.evaluation.score for t in threads} and len(on_cluster) == 4
    assert on_cluster[("add-1", 0)] == 0.0 and on_cluster[("add-0", 1)] == 1.0
    asked = openai_server.requests[by_threads:]
    assert _sampled(asked) == _sampled(openai_server.requests[:by_threads])  # the same seeds asked for
    sent_keys = {h.get("authorization") for h in openai_server.headers[by_threads:]}
    assert sent_keys == {f"Bearer {FAKE_KEY}"}  # the workers' key: the driver had none
    for row in results["tasks"]:  # the driver logged and cached what the workers returned
        assert (out / "trajectories" / f"{row['trajectory_id']}.json").is_file()
    assert len(list((recreate_home / "rollouts").glob("*/*-s[01].json"))) == 4
    assert not list(head.home.rglob("*.json")), "a worker wrote records of its own"

    again = _eval(head, tmp_path, data, openai_server.url, **token)
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(openai_server.requests) == by_threads + len(asked)  # the driver's cache: nothing re-run
    token_text = head.token_file.read_text()
    assert not [p for p in out.rglob("*") if p.is_file() and token_text.encode() in p.read_bytes()]
    assert token_text not in done.stdout + done.stderr + again.stdout + again.stderr


_JOIN = """
import sys, ray
from recreate.evaluation.ray_executor import make_executor
make_executor(sys.argv[1]).connect()
print(ray.cluster_resources()["CPU"], ray.util.client.ray.is_connected())
"""


@needs_ray
@pytest.mark.parametrize("source", ["RAY_AUTH_TOKEN", "~/.ray/auth_token"])
def test_the_token_may_come_from_any_of_rays_places(head, source, tmp_path):
    home = tmp_path / "driver-home"
    env = {k: v for k, v in os.environ.items() if k not in RAY_SETTINGS}
    env |= {"HOME": str(home), "RAY_AUTH_MODE": "token"}
    if source == "RAY_AUTH_TOKEN":
        env[source] = head.token_file.read_text()
    else:
        (home / ".ray").mkdir(parents=True)
        shutil.copy(head.token_file, home / ".ray" / "auth_token")
    joined = subprocess.run([sys.executable, "-c", _JOIN, head.address], env=env, capture_output=True,
                            text=True, timeout=150)  # fmt: skip
    why = joined.stderr[-3000:] + _client_server_logs(head)
    assert joined.returncode == 0 and joined.stdout.split() == ["2.0", "True"], why


@needs_ray
@pytest.mark.parametrize(
    ("settings", "sends"),
    [
        ({}, "no token"),  # Ray's default for a driver given an address: no token mode
        ({"RAY_AUTH_MODE": "token"}, "or none"),  # token mode, and no token anywhere
        ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": "/nonexistent/token"}, "or none"),
        ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}, "not the cluster's"),
    ],
    ids=["no-token-mode", "no-token", "no-token-file", "a-wrong-token"],
)
def test_a_driver_without_the_clusters_token_is_one_line_at_once(
    head, settings, sends, openai_server, recreate_home, tmp_path
):
    data = write_tasks(tmp_path / "tasks.jsonl", 1)
    started = time.monotonic()
    done = _eval(head, tmp_path, data, openai_server.url, **settings)
    took = time.monotonic() - started
    assert done.returncode == 2 and took < 15, (took, done.stderr[-3000:])
    err = done.stderr
    assert err.startswith(f"error: --executor {head.address}: the Ray cluster at 127.0.0.1:"), err
    assert err.count("\n") == 1 and sends in err
    assert "RAY_AUTH_MODE=token" in err and "RAY_AUTH_TOKEN_PATH" in err and "~/.ray/auth_token" in err
    assert head.token_file.read_text() not in err and not openai_server.requests
