"""`recreate eval` with no model configured serves the embedded model for its duration, as evolve does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recreate.local import EMBEDDED_NAME
from recreate.local.server import is_alive, servers_dir
from tests.conftest import REPO, require_local_extra

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]
ARITHMETIC = REPO / "examples" / "arithmetic"
UNSET = ("RECREATE_MODEL", "RECREATE_OPTIMIZER_MODEL", "RECREATE_HOME")


def test_eval_without_a_model_serves_the_embedded_one_and_stops_it(tmp_path: Path) -> None:
    require_local_extra()
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in UNSET and not k.startswith("OPENAI_")}
    argv = [
        sys.executable, "-m", "recreate", "eval", "--scaffold", str(ARITHMETIC / "scaffold"),
        "--domain", "math", "--data", str(ARITHMETIC / "tasks.jsonl"), "--split", "val", "--limit", "2",
        "--home", str(home), "--no-progress",
    ]  # fmt: skip
    log = tmp_path / "stderr.txt"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            argv, env=env | {"PYTHONPATH": str(REPO)}, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=stderr
        )
    servers: set[int] = set()  # the pids of the servers it started, read from their state files
    deadline = time.time() + 300
    while proc.poll() is None:
        assert time.time() < deadline, "recreate eval did not finish in 300 s"
        for state in servers_dir(home).glob("*.json"):
            try:
                servers.add(json.loads(state.read_text(encoding="utf-8"))["pid"])
            except (OSError, ValueError, KeyError):  # written a moment after it is created
                continue
        time.sleep(0.1)
    err = log.read_text(encoding="utf-8")
    assert proc.returncode == 0, err
    assert "no model configured: running the embedded" in " ".join(err.split())
    results = json.loads(next((home / "evals").glob("*/results.json")).read_text(encoding="utf-8"))
    assert results["complete"] and results["run"]["model"] == "local" and len(results["tasks"]) == 2
    trajectories = list((home / "evals").glob("*/trajectories/**/*.json"))
    assert trajectories and all(EMBEDDED_NAME in t.read_text(encoding="utf-8") for t in trajectories)
    assert servers, "no server state file was seen while it ran"
    assert not [pid for pid in servers if is_alive(pid)], "a model server outlived recreate eval"
    assert not list(servers_dir(home).glob("*.json"))
