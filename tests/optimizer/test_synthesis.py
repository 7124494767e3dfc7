"""Synthesis and bootstrap can write valid patches: what their requests carry, checked on the real
requests to the scripted endpoint; a round's memory votes survive an empty patch."""

from __future__ import annotations

from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.experience.store import ExperienceStore
from recreate.models import make_chat_model
from recreate.optimizer import EvolveConfig
from recreate.optimizer.loop import EvolveLoop
from recreate.optimizer.proposals import Proposal
from recreate.optimizer.synthesis import bootstrap, synthesize
from recreate.scaffold import ScaffoldStore, load_scaffold
from recreate.scaffold.ops import OP_NAMES
from recreate.testing import Reply, text, tool_call
from tests.optimizer.script import EVALUATOR, GOOD_OPS, WORDS
from tests.optimizer.test_counters import run

REPO = Path(__file__).resolve().parents[2]
MINIMAL = REPO / "scaffolds" / "minimal"


def _submit_schema(body: dict) -> dict:
    tool = next(t for t in body["tools"] if t["function"]["name"] == "submit_patch")
    return tool["function"]["parameters"]["properties"]["ops"]


def test_synthesis_sees_the_op_schema_the_run_scores_and_clean_runs(openai_server):
    openai_server.enqueue(
        tool_call("submit_patch", {"ops": GOOD_OPS[:1], "diagnosis": "recurring"}), text("ok")
    )
    proposals = [
        Proposal(source="alpha", trajectory_ids=["t-a"], ops=GOOD_OPS[:1], status="ok", diagnosis="case"),
        Proposal(source="golf", trajectory_ids=["t-g"], status="empty", cause="none", diagnosis="clean run"),
        Proposal(source="hotel", status="dropped", errors=["bad op"]),
    ]
    patch = synthesize(
        proposals,
        scaffold=load_scaffold(MINIMAL),
        domain_text="words",
        model=make_chat_model(f"scripted@{openai_server.url}", role="synthesis"),
        outcomes={"alpha": {"score": 0.0, "error": None}, "golf": {"score": 1.0, "error": None}},
    )
    assert patch.status == "ok" and patch.trajectory_ids == ["t-a", "t-g"]  # the clean run is evidence
    body = openai_server.requests[0]
    system, request = body["messages"][0]["content"], body["messages"][1]["content"]
    assert all(f'"op": "{name}"' in system for name in OP_NAMES)  # the op reference
    assert '"score": 0.0' in request and '"score": 1.0' in request and "clean run" in request
    assert "hotel" not in request
    ops = _submit_schema(body)
    kinds = {variant["properties"]["op"]["const"] for variant in ops["items"]["oneOf"]}
    assert kinds == set(OP_NAMES)  # not list[dict]: every op's fields are in the tool's schema


def test_proposals_the_models_context_cannot_hold_end_the_round_without_a_patch(openai_server):
    # the endpoint's refusal (vLLM's words): a resume would send the same request, so raising never ends
    overflow = "This model's maximum context length is 8192 tokens. However, you requested 9100 tokens."
    openai_server.enqueue(Reply(status=400, error=overflow))
    proposals = [Proposal(source="alpha", trajectory_ids=["t-a"], ops=GOOD_OPS[:1], status="ok")]
    patch = synthesize(
        proposals,
        scaffold=load_scaffold(MINIMAL),
        domain_text="words",
        model=make_chat_model(f"scripted@{openai_server.url}", role="synthesis"),
    )
    assert patch.status == "empty" and not patch.ops
    assert "outgrew the model's context" in patch.errors[0] and "8192 tokens" in patch.errors[0]

    openai_server.enqueue(Reply(status=400, error="invalid 'messages'"))  # any other refusal still raises
    with pytest.raises(Exception, match="invalid 'messages'"):
        synthesize(
            proposals,
            scaffold=load_scaffold(MINIMAL),
            domain_text="words",
            model=make_chat_model(f"scripted@{openai_server.url}", role="synthesis"),
        )


def test_bootstrap_sees_the_op_schema(openai_server):
    openai_server.enqueue(tool_call("submit_patch", {"ops": GOOD_OPS[:1], "diagnosis": "v0"}), text("ok"))
    patch = bootstrap(
        load_scaffold(MINIMAL),
        domain_text="words",
        model=make_chat_model(f"scripted@{openai_server.url}", role="synthesis"),
    )
    assert patch.status == "ok"
    body = openai_server.requests[0]
    assert all(f'"op": "{name}"' in body["messages"][0]["content"] for name in OP_NAMES)
    assert "oneOf" in _submit_schema(body)["items"]


def test_memory_votes_are_kept_when_the_patch_is_empty(recreate_home):
    scaffolds = ScaffoldStore(recreate_home / "scaffolds")
    seed = scaffolds.commit(load_scaffold(MINIMAL)).ref
    ref = scaffolds.apply(seed, [{"op": "add_memory", "id": "m1", "title": "a", "content": "x"}]).ref
    experience = ExperienceStore(recreate_home / "experience", embedding="hash")
    experience.add(run(True, "[m1] a\nx", "t-1"))
    domain = get_domain("jsonl", data=WORDS / "tasks.jsonl", evaluator=EVALUATOR)
    loop = EvolveLoop(
        domain=domain,
        trainset=domain.tasks("train"),
        valset=domain.tasks("val"),
        seed_ref=seed,
        scaffolds=scaffolds,
        experience=experience,
        rollout=None,
        optimizer_model=None,
        synthesis_model=None,
        sandbox="local",
        run_dir=recreate_home,
        config=EvolveConfig(),
    )
    clean = Proposal(source="t", trajectory_ids=["t-1"], status="empty", cause="none")
    result = {
        "round": 0,
        "task_id": "t",
        "trajectory_id": "t-1",
        "score": 1.0,
        "proposal": clean.model_dump(),
    }
    patch = loop.synthesize({"round": 0, "current": ref, "results": [result]})["patches"][0]
    assert patch["status"] == "ok" and patch["ops"][0]["op"] == "vote" and patch["ops"][0]["helpful"] == 1
    gated = loop.gate({"round": 0, "current": ref, "patches": [{"round": 0, **patch}], "results": [result]})
    assert gated["history"][0]["accepted"] and "votes only" in gated["history"][0]["reason"]  # no rollouts
    assert scaffolds.head("minimal").ref == gated["current"]
    assert scaffolds.load(gated["current"]).memory[0].helpful == 1


def test_worked_examples_count_in_the_scaffold_size():
    from recreate.optimizer.synthesis import scaffold_size
    from recreate.scaffold.model import Example

    seed = load_scaffold(Path(__file__).resolve().parents[2] / "scaffolds" / "minimal")
    example = Example(task="What is 3 + 4?", steps=[{"command": "echo 7", "output": "7"}, {"submit": "7"}])
    with_example = seed.model_copy(update={"examples": [example]})
    assert scaffold_size(with_example) == scaffold_size(seed) + len("What is 3 + 4?") + len("echo 7") + 2
