"""The domain agent end to end on the real embedded model (llama.cpp engine): three tasks run in bwrap
sandboxes, are evaluated and stored, with the sampled tokens' ids and log-probs in every step."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.evaluation import Rollouts
from recreate.experience.store import ExperienceStore
from recreate.local import local_agent_options, start_server
from recreate.sandbox import get_sandbox
from recreate.scaffold import load_scaffold

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = """Examples of a whole run:
Task: What is 2 + 5?
You: ```bash
echo $((2 + 5))
```
Output: 7
You: ```submit
7
```"""


def test_the_agent_runs_three_tasks_on_the_real_model(embedded_server, tmp_path):
    home, info = embedded_server
    sandbox = get_sandbox("bwrap")
    ok, why = sandbox.available()
    if not ok:
        pytest.skip(f"bubblewrap unavailable: {why}")
    tasks = tmp_path / "sums.jsonl"
    rows = [{"id": f"sum-{a}-{b}", "problem": f"What is {a} + {b}?", "answer": str(a + b)}
            for a, b in ((3, 4), (12, 30), (8, 9))]  # fmt: skip
    tasks.write_text("".join(json.dumps(row) + "\n" for row in rows))
    domain = get_domain("math", data=tasks)
    seed = load_scaffold(REPO / "scaffolds" / "minimal")
    scaffold = seed.model_copy(
        update={
            "system_prompt": seed.system_prompt + "\n" + EXAMPLES,
            "limits": seed.limits.model_copy(update={"max_steps": 3}),
        }
    )
    store = ExperienceStore(tmp_path / "experience", embedding="hash")
    runner = Rollouts(
        scaffold, domain, model=info.spec, sandbox=sandbox, store=store, cache=False, run_id="real-model",
        trajectory_dir=tmp_path / "trajectories", **local_agent_options(info),
    )  # fmt: skip
    trajectories = runner.run_many(domain.tasks("all"), concurrency=3, progress=False)
    store.close()

    assert sorted(t.task_id for t in trajectories) == ["sums-sum-12-30", "sums-sum-3-4", "sums-sum-8-9"]
    reopened = ExperienceStore(tmp_path / "experience", embedding="hash")
    for traj in trajectories:
        assert traj.evaluation is not None and 0.0 <= traj.evaluation.score <= 1.0
        assert traj.outcome.exit_status in ("submitted", "max_steps", "error")
        assert traj.model.name == info.model and traj.model.base_url_host == "127.0.0.1"
        assert traj.model.sampling["temperature"] == 0.7
        assert traj.steps, "the model was called"
        for step in traj.steps:
            assert step.token_ids is not None and len(step.token_ids) == len(step.logprobs or [])
            assert len(step.token_ids) == step.usage.completion_tokens
        stored = reopened.get(traj.trajectory_id)
        assert stored.evaluation == traj.evaluation
    reopened.close()


def test_a_conversation_the_real_engine_cannot_hold_ends_the_run_as_context_exceeded(
    local_extra, tmp_path, caplog
):
    """A small context (512 tokens a slot) fills within a few real replies: the engine refuses the
    request, and the run ends as its own outcome, scored 0 and logged without a warning."""
    sandbox = get_sandbox("bwrap")
    ok, why = sandbox.available()
    if not ok:
        pytest.skip(f"bubblewrap unavailable: {why}")
    tasks = tmp_path / "sums.jsonl"
    tasks.write_text(json.dumps({"id": "sum", "problem": "What is 3 + 4?", "answer": "7"}) + "\n")
    domain = get_domain("math", data=tasks)
    scaffold = load_scaffold(REPO / "scaffolds" / "minimal")  # no examples: long, malformed replies
    server = start_server(tmp_path / "home", engine="llamacpp", parallel=1, ctx_per_slot=512)
    try:
        runner = Rollouts(
            scaffold, domain, model=server.info.spec, sandbox=sandbox, cache=False, run_id="overflow",
            trajectory_dir=tmp_path / "trajectories", **local_agent_options(server.info),
        )  # fmt: skip
        with caplog.at_level(logging.INFO, logger="recreate"):
            traj = runner.run(domain.tasks("all")[0], seed=3)
    finally:
        server.stop()
    if traj.outcome.exit_status == "submitted":
        pytest.skip("the model submitted before its context filled (seeded, but engine-dependent)")
    assert traj.outcome.exit_status == "context_exceeded", traj.outcome
    assert "context" in (traj.outcome.error or "") and traj.evaluation.score == 0
    assert "no submission" in traj.evaluation.feedback
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
