"""The domain agent end to end on the real embedded model (llama.cpp engine): three tasks run in bwrap
sandboxes, are evaluated and stored, with the sampled tokens' ids and log-probs in every step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.evaluation import Rollouts
from recreate.experience.store import ExperienceStore
from recreate.local import local_agent_options
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
