"""`recreate evolve` / `recreate eval` as a new user runs them on a machine without bubblewrap: refused in
one line that names the package, in seconds, before any model is called; and a sandbox that breaks
mid-run stops the run resumably, with errors on record instead of zeros."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from recreate.domains import get_domain
from tests.evaluation.conftest import MINIMAL
from tests.optimizer.script import EVALUATOR, WORDS, responder
from tests.optimizer.test_evolve_cli import clean_env, evolve_args

pytestmark = pytest.mark.bwrap
REAL_BWRAP = "/usr/bin/bwrap"


def path_without_bwrap(folder: Path) -> str:
    """A PATH with every tool of this machine but bubblewrap."""
    folder.mkdir()
    for directory in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        for tool in Path(directory).glob("*") if Path(directory).is_dir() else []:
            if tool.name != "bwrap" and not os.path.lexists(folder / tool.name):
                (folder / tool.name).symlink_to(tool)
    return str(folder)


def test_evolve_without_bubblewrap_is_refused_in_one_line_before_any_model_call(recreate_home, openai_server):
    env = clean_env(PATH=path_without_bwrap(recreate_home.parent / "bin"))
    began = time.monotonic()
    args = evolve_args(recreate_home, openai_server.url)
    res = subprocess.run(args, capture_output=True, text=True, env=env, timeout=240)
    # refused at start-up (no model call, no retries): the bound only allows for a busy machine's imports
    assert time.monotonic() - began < 120
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    line = res.stderr.strip()
    assert line.startswith("error: sandbox bwrap:") and "\n" not in line
    assert "apt-get install" in line and "bubblewrap" in line and "--sandbox docker" in line
    assert not openai_server.requests and not (recreate_home / "runs").exists()


def test_eval_without_bubblewrap_is_refused_too(recreate_home, openai_server, tmp_path):
    env = clean_env(PATH=path_without_bwrap(tmp_path / "bin"), RECREATE_HOME=str(recreate_home))
    args = [sys.executable, "-m", "recreate", "eval", "--scaffold", str(MINIMAL),
            "--domain", "jsonl", "--data", str(WORDS / "tasks.jsonl"), "--evaluator", EVALUATOR,
            "--model", f"scripted@{openai_server.url}", "--no-progress"]  # fmt: skip
    res = subprocess.run(
        args, capture_output=True, text=True, env=env, timeout=240, cwd=Path(__file__).parents[2]
    )
    assert res.returncode == 2 and "error: sandbox bwrap:" in res.stderr and "bubblewrap" in res.stderr
    assert not openai_server.requests


@pytest.fixture
def failing_bwrap():
    made: list[Path] = []
    yield lambda after: made.append(_failing_bwrap(after)) or made[-1]
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


def _failing_bwrap(after: int) -> Path:
    """A folder (readable by the sandbox's unprivileged user) with a `bwrap` that works `after - 1`
    times, then fails as a bubblewrap that cannot create namespaces any more."""
    folder = Path(tempfile.mkdtemp(prefix="test-bwrap-shim-"))
    folder.chmod(0o755)
    counter = folder / "starts"
    counter.touch(mode=0o666)
    counter.chmod(0o666)  # each sandbox starts as another throwaway uid
    script = folder / "bwrap"
    script.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = --version ] && exec {REAL_BWRAP} "$@"\n'
        f"echo x >> {counter}\n"
        f'[ "$(wc -l < {counter})" -ge {after} ] && '
        "{ echo 'bwrap: Creating new namespace failed: No space left on device' >&2; exit 1; }\n"
        f'exec {REAL_BWRAP} "$@"\n'
    )
    script.chmod(0o755)
    return folder


def test_a_sandbox_that_breaks_mid_run_stops_evolve_resumably(recreate_home, openai_server, failing_bwrap):
    openai_server.responder = responder
    shim = failing_bwrap(after=3)  # the preflight's sandboxes work (probe, evaluator); the validation's not
    args = evolve_args(recreate_home, openai_server.url, "--rounds", "1", "--concurrency", "1", "--run", "r")
    res = subprocess.run(args, capture_output=True, text=True, timeout=300,
                         env=clean_env(PATH=f"{shim}:{os.environ['PATH']}"))  # fmt: skip
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert (
        "3 rollouts in a row failed" in res.stderr + res.stdout and "No space left" in res.stderr + res.stdout
    )
    logs = [json.loads(p.read_text()) for p in (recreate_home / "runs" / "r" / "trajectories").glob("*.json")]
    errors = [t for t in logs if t["metadata"].get("rollout_error") == "machine"]
    assert len(errors) == 3 and all(t["evaluation"] is None for t in errors)  # on record, not zeros

    args = evolve_args(
        recreate_home, openai_server.url, "--rounds", "1", "--concurrency", "1", "--resume", "r"
    )
    res = subprocess.run(args, capture_output=True, text=True, timeout=300, env=clean_env())
    assert res.returncode == 0, res.stderr
    result = json.loads((recreate_home / "runs" / "r" / "result.json").read_text())
    v0 = result["history"][0]
    val = get_domain("jsonl", data=WORDS / "tasks.jsonl", evaluator=EVALUATOR).tasks("val")
    assert sorted(v0["val"]) == sorted(t.id for t in val) and not v0["errors"]  # every one scored now
