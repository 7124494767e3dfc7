"""`recreate evolve` with no endpoint configured runs the whole loop on the embedded model (the README's
main job on a fresh machine): one notice line, a table of versions, a report, and no server left."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from recreate.local.server import running_servers
from tests.conftest import require_local_extra
from tests.optimizer.script import EVALUATOR, WORDS
from tests.optimizer.test_evolve import SEED
from tests.optimizer.test_evolve_cli import clean_env

pytestmark = pytest.mark.slow


def test_evolve_without_an_endpoint_runs_on_the_embedded_model(recreate_home, tmp_path):
    require_local_extra()
    seed = tmp_path / "seed"
    seed.mkdir()
    doc = yaml.safe_load((SEED / "scaffold.yaml").read_text())
    doc["limits"]["max_steps"] = 2  # a short run: the point is the loop on a real model, not its score
    (seed / "scaffold.yaml").write_text(yaml.safe_dump(doc))
    args = [
        sys.executable, "-m", "recreate", "evolve", "--seed", str(seed), "--domain", "jsonl",
        "--data", str(WORDS / "tasks.jsonl"), "--evaluator", EVALUATOR, "--rounds", "1", "--batch-size", "1",
        "--train-limit", "1", "--val-limit", "1", "--concurrency", "2", "--budget-usd", "1",
        "--home", str(recreate_home), "--run", "local-run",
    ]  # fmt: skip
    res = subprocess.run(args, capture_output=True, text=True, env=clean_env(), timeout=1200)
    assert res.returncode in (0, 3), res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    out = " ".join(res.stdout.split())
    assert "no model endpoint configured: running the embedded SmolLM2-135M-Instruct" in out
    assert "run local-run" in out and "final:" in out
    run = recreate_home / "runs" / "local-run"
    assert (run / "report" / "report.html").is_file()
    trajectories = list((run / "trajectories").glob("*.json"))
    assert trajectories, "the agent ran on the local model"
    assert running_servers(recreate_home) == []  # the server stopped with the run
