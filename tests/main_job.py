"""One short real run of the main job (`recreate evolve --model local --finetune-every 1`), made once per
test session and shared: tests/finetune/test_evolve_step.py checks the loop on it and tests/ui browse
its home, so the suite pays for one such run (about two minutes on 2 cores), not one per area.

The run: the embedded model as the agent, 2 training tasks (4 sampled runs each), 2 validation tasks
(1 seed), one round, one LoRA step on the round's runs, the new policy version's gate on the validation
tasks, then a resume of the finished run. The optimizer's choices are scripted (it proposes nothing);
the agent, sampling, training, publishing and serving are real. The base model's HF directory is linked
into the home's models/ as `recreate evolve` converts it there. Registered in tests/conftest.py."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the run's own imports are in the fixture: tests/conftest.py imports this module
    from recreate.domains import Task
    from recreate.experience.store import ExperienceStore
    from recreate.optimizer.optimizer import EvolveResult
    from recreate.scaffold import Scaffold

REPO = Path(__file__).resolve().parents[1]
MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
RUN_ID = "ft-run"
PAIRS = [(31, 45), (12, 66), (58, 23), (40, 37)]  # 2 training tasks, 2 validation tasks


@dataclass
class MainJobRun:
    home: Path
    run_id: str
    base: Path  # the base model's HF directory
    train: list[Task]
    val: list[Task]
    result: EvolveResult
    resumed: EvolveResult  # the same run started again once finished
    served: str  # the policy version served when the first run ended
    current: str  # the policy's current version after the resume
    experience: ExperienceStore  # the run's store (closed at the end of the session)
    progress: list[str] = field(default_factory=list)  # the recreate.progress log lines
    seconds: float = 0.0  # what the run cost, resume included


def seed_scaffold() -> Scaffold:
    from recreate.scaffold import load_scaffold
    from recreate.scaffold.model import Example

    seed = load_scaffold(REPO / "scaffolds" / "minimal")
    examples = [
        Example(task=f"What is {a} + {b}?", steps=[{"command": f"echo {MARKER}; echo $(({a} + {b}))"}])
        for a, b in ((3, 4), (25, 17))
    ]
    limits = seed.limits.model_copy(update={"max_steps": 2})
    return seed.model_copy(update={"examples": examples, "limits": limits, "action_format": "text"})


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="session")
def main_job_run(hf_model: Path, tmp_path_factory: pytest.TempPathFactory) -> MainJobRun:
    from recreate.domains import get_domain
    from recreate.experience.store import ExperienceStore
    from recreate.finetune import FinetuneSettings, FinetuneStep, ServedPolicy
    from recreate.local import local_agent_options
    from recreate.optimizer import EvolveConfig, ReCreateOptimizer
    from recreate.testing import ScriptedOpenAIServer, text

    base_dir = tmp_path_factory.mktemp("main-job")
    home = base_dir / "home"
    (home / "models").mkdir(parents=True)
    (home / "models" / hf_model.name).symlink_to(hf_model.resolve(), target_is_directory=True)
    data = base_dir / "sums.jsonl"
    rows = [
        {"id": f"s{a}-{b}", "problem": f"What is the sum of {a} and {b}?", "answer": str(a + b)}
        for a, b in PAIRS
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    domain = get_domain("math", data=data)
    tasks = domain.tasks("all")
    train, val = tasks[:2], tasks[2:]
    progress, lines = logging.getLogger("recreate.progress"), _Lines()
    level, started = progress.level, time.monotonic()
    progress.setLevel(logging.INFO)
    progress.addHandler(lines)
    with pytest.MonkeyPatch.context() as patch, ScriptedOpenAIServer() as server:
        patch.setenv("RECREATE_HOME", str(home))
        patch.chdir(base_dir)
        server.responder = lambda body: text("No change is needed.")  # the meta-agent proposes nothing
        policy = ServedPolicy(home, home / "runs" / RUN_ID / "policy", parallel=4, base=hf_model)
        step = FinetuneStep(
            policy, FinetuneSettings(every=1, steps=1, lora_r=4, group_size=4, max_length=768, val_seeds=1)
        )
        store = ExperienceStore(home / "experience", embedding="hash")
        try:
            with policy:
                opt = ReCreateOptimizer(
                    optimizer_model=f"scripted@{server.url}", agent_model=policy.server.info.spec,
                    agent_options={**local_agent_options(policy.server.info), "max_tokens": 40},
                    finetune=step, home=home, experience=store,
                    config=EvolveConfig(rounds=1, batch_size=2), max_concurrency=4,
                )  # fmt: skip
                run = {"seed": seed_scaffold(), "domain": domain, "trainset": train, "valset": val}
                result = opt.optimize(**run, run_id=RUN_ID)
                served = policy.server.info.model
                resumed = opt.optimize(**run, run_id=RUN_ID)
        finally:
            progress.removeHandler(lines)
            progress.setLevel(level)
    return MainJobRun(
        home, RUN_ID, hf_model, train, val, result, resumed, served, policy.current.name, store, lines.lines,
        time.monotonic() - started,
    )  # fmt: skip
