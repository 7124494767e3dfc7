"""--max-rollouts holds with rollouts running concurrently: never one more than the limit."""

from __future__ import annotations

import json

import pytest

from recreate.domains import get_domain
from tests.optimizer.script import EVALUATOR, WORDS, responder
from tests.optimizer.test_evolve import SEED, optimizer

pytestmark = pytest.mark.bwrap


@pytest.mark.parametrize("limit", [2, 5])
def test_the_rollout_limit_is_not_overshot_by_the_concurrency(recreate_home, openai_server, limit):
    openai_server.responder = responder
    domain = get_domain("jsonl", data=WORDS / "tasks.jsonl", evaluator=EVALUATOR)
    opt = optimizer(recreate_home, openai_server.url, max_rollouts=limit)  # 4 rollouts at a time
    result = opt.optimize(
        seed=SEED, domain=domain, trainset=domain.tasks("train"), valset=domain.tasks("val")
    )
    assert "rollouts" in result.stopped
    assert json.loads((result.run_dir / "spent.json").read_text())["rollouts"] == limit
    assert len(opt.experience.list()) == limit  # rollouts run, not only counted
