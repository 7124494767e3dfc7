"""One fixture home for the UI tests, built once per session by real runs: a scripted evolve run (the
optimizer tests' `words` domain: v2 accepted, v3 rejected), `recreate eval` of its result, a stored
trajectory full of markup that must never execute (with token log-probabilities) and one of a scaffold
loaded from a directory (no version).

The scripted endpoint cannot be fine-tuned: model versions, their gates and fine-tuning steps are those
of the session's real main job (tests/main_job.py), browsed by tests/ui/test_real_home.py."""

from __future__ import annotations

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
from tests.optimizer.script import EVALUATOR, GATE_ALPHA, WORDS, responder

REPO = Path(__file__).resolve().parents[2]
XSS_ID = "t-xss0000000000000"
DIR_ID = "t-dir0000000000000"
EVAL_ID = "words-val"
XSS = (
    '<script>window.__xss = 1; alert("script")</script>'
    '<a id="js-link" href="javascript:alert(\'link\')">click me</a>'
    '<img src="x" onerror="window.__xss = 2; alert(\'img\')">'
)


@dataclass
class UiHome:
    path: Path
    run_id: str


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
            config=EvolveConfig(gate_alpha=GATE_ALPHA, rounds=2, batch_size=3),
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
    return UiHome(home, result.run_id)


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
