"""One fixture home for the UI tests, built once per session by real runs: a scripted evolve run (the
optimizer tests' `words` domain: v2 accepted, v3 rejected), `recreate eval` of its result, a stored
trajectory full of markup that must never execute (with token log-probabilities), one of a scaffold
loaded from a directory (no version), and a real TAPO training run of a tiny model as the run's
fine-tuning step after round 2 (when the train extra is installed).

The scripted endpoint cannot be fine-tuned, so that step's model gate is recorded as the loop records
it (`paired_gate` over the parent's validation scores and the eval's re-run of the final scaffold, the
candidate's) under a candidate version name; a real fine-tuning home is the real-home browser test's
(tests/ui/test_real_home.py, RECREATE_UI_REAL_HOME)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.evaluation.cli import eval_command
from recreate.experience.schema import Evaluation, Observation, Outcome, ScaffoldRef, Step, Trajectory
from recreate.experience.store import ExperienceStore
from recreate.optimizer import EvolveConfig, ReCreateOptimizer
from recreate.testing import ScriptedOpenAIServer
from tests.optimizer.script import EVALUATOR, WORDS, responder

REPO = Path(__file__).resolve().parents[2]
XSS_ID = "t-xss0000000000000"
DIR_ID = "t-dir0000000000000"
EVAL_ID = "words-val"
CANDIDATE = "scripted+ft1-0123abcd"
XSS = (
    '<script>window.__xss = 1; alert("script")</script>'
    '<a id="js-link" href="javascript:alert(\'link\')">click me</a>'
    '<img src="x" onerror="window.__xss = 2; alert(\'img\')">'
)


@dataclass
class UiHome:
    path: Path
    run_id: str
    training: str | None  # the training run's id (its path under the home), None without the train extra


def _xss_trajectory(run_id: str) -> Trajectory:
    return Trajectory(
        trajectory_id=XSS_ID,
        task_id="alpha",
        run_id=run_id,
        domain="jsonl",
        scaffold=ScaffoldRef(name="minimal", version="v1"),
        messages=[
            {"role": "system", "content": XSS},
            {"role": "user", "content": f"Reply with the word: {XSS}"},
            {"role": "assistant", "content": XSS},
        ],
        steps=[
            Step(
                index=0,
                action={"tool": "bash", "args": {"command": XSS}},
                observation=Observation(stdout=XSS, stderr=XSS, exit_code=1, stdout_truncated=True),
                token_ids=[11, 12, 13, 14],
                logprobs=[-0.01, -0.3, -2.5, -7.0],
            )
        ],
        outcome=Outcome(exit_status="submitted", submission=XSS),
        evaluation=Evaluation(score=0.0, passed=False, feedback=XSS, details={"html": XSS}),
    )


def _directory_trajectory() -> Trajectory:
    """A run of a scaffold loaded from a directory, as `recreate eval --scaffold DIR` stores it."""
    return Trajectory(
        trajectory_id=DIR_ID, task_id="bravo", run_id=EVAL_ID, domain="jsonl",
        scaffold=ScaffoldRef(name="minimal"), outcome=Outcome(exit_status="submitted", submission="bravo"),
        evaluation=Evaluation(score=1.0, passed=True),
    )  # fmt: skip


def _record_model_step(home: Path, run_id: str, trained: bool) -> None:
    """The fine-tuning step after round 2 in result.json, as the loop writes it (see the docstring)."""
    from recreate.evaluation import paired_gate

    run_dir = home / "runs" / run_id
    doc = json.loads((run_dir / "result.json").read_text())
    kept = [h for h in doc["history"] if h["accepted"]][-1]
    rescored = json.loads((home / "evals" / EVAL_ID / "results.json").read_text())["tasks"]
    scores = {t["task_id"]: t["score"] for t in rescored}
    before = {key: v for key, v in kept["val"].items() if key.split("#")[0] in scores}
    after = {key: scores[key.split("#")[0]] for key in before}
    verdict = paired_gate(before, after, min_improvement=0.0, seed=0)
    step = {
        "round": 2, "scaffold": kept["ref"], "parent": "scripted", "accepted": verdict.accepted,
        "trajectories": 6, "reward_mean": 0.5, "model": CANDIDATE, "val": after, "parent_val": before,
        "reason": verdict.reason, "gate": verdict.to_dict(), "errors": [],
    }  # fmt: skip
    if trained:
        rows = [json.loads(line) for line in (run_dir / TRAIN_DIR / "metrics.jsonl").read_text().splitlines()]
        step["train"] = {k: v for k, v in rows[-1].items() if isinstance(v, int | float)}
    doc["models"] = [step]
    doc["final_model"] = CANDIDATE if verdict.accepted else "scripted"
    (run_dir / "result.json").write_text(json.dumps(doc))


TRAIN_DIR = "finetune/round-002/train"


def _train(home: Path, output_dir: Path) -> bool:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return False
    from tapo_backend.config import TrainConfig
    from tapo_backend.trainer import train
    from tests.tapo_backend.conftest import save_tiny_model, synthetic_trajectory

    logs = home.parent / "train-logs"
    logs.mkdir()
    for task in range(3):
        for answer in ("A", "B"):
            synthetic_trajectory(task, answer, trajectory_id=f"t-{task}-{answer}").save(
                logs / f"{task}{answer}.json"
            )
    model = save_tiny_model(home.parent / "tiny-llama")
    config = TrainConfig(
        algo="tapo",
        lr=3e-3,
        micro_batch_size=3,
        epochs=3,
        run_name="demo",
        output_dir=str(output_dir),
    )
    train(config, logs, str(model))
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    return True


@pytest.fixture(scope="session")
def ui_home(tmp_path_factory: pytest.TempPathFactory) -> UiHome:
    base = tmp_path_factory.mktemp("ui")
    home = base / "home"
    domain = get_domain("jsonl", data=WORDS / "tasks.jsonl", evaluator=EVALUATOR)
    with pytest.MonkeyPatch.context() as patch, ScriptedOpenAIServer() as server:
        patch.setenv("RECREATE_HOME", str(home))
        patch.chdir(base)
        server.responder = responder
        model = f"scripted@{server.url}"
        store = ExperienceStore(home / "experience", embedding="hash")
        result = ReCreateOptimizer(
            optimizer_model=model,
            agent_model=model,
            sandbox="bwrap",
            max_concurrency=4,
            home=home,
            experience=store,
            config=EvolveConfig(rounds=2, batch_size=3),
        ).optimize(
            seed=REPO / "scaffolds" / "minimal",
            domain=domain,
            trainset=domain.tasks("train"),
            valset=domain.tasks("val"),
        )
        store.add(_xss_trajectory(result.run_id))
        store.add(_directory_trajectory())
        store.close()
        eval_command(
            scaffold=result.final, domain="jsonl", data=WORDS / "tasks.jsonl", split="val", model=model,
            concurrency=4, limit=None, seeds=1, run=EVAL_ID, run_id=None, sandbox="bwrap",
            evaluator=EVALUATOR, option=[], progress=False, home=home, as_json=False, executor="threads",
        )  # fmt: skip
        trained = _train(home, home / "runs" / result.run_id / TRAIN_DIR)
        _record_model_step(home, result.run_id, trained)
    return UiHome(home, result.run_id, f"runs/{result.run_id}/{TRAIN_DIR}" if trained else None)


@contextmanager
def serving(home: Path) -> Iterator[str]:
    """The app over `home` served by uvicorn on a free port of 127.0.0.1, as `recreate ui` serves it."""
    import uvicorn

    from recreate.ui import create_app

    app = create_app(home, embedding="hash")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the ui server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def ui_url(ui_home: UiHome) -> Iterator[str]:
    with serving(ui_home.path) as url:
        yield url
