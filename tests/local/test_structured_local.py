"""The structured protocol against the real embedded model (llama.cpp, SmolLM2-135M): every reply it
decodes is one the schema allows, so each reflection ends in a proposal or a stated "no change".

This asserts the protocol, not the model's judgement: `benchmarks/structured_proposals.py` prints the
rate over more reflections, and what the proposals say."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from recreate.local import local_chat_model
from recreate.optimizer.structured import Digest, proposal_schema, reflect_structured
from recreate.scaffold import apply, load_scaffold
from tests.optimizer.test_structured import _run

REPO = Path(__file__).resolve().parents[2]

RUNS = [  # a clean pass, an expression printed and never submitted, a command that is no command
    ("What is 40 + 2?", True, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo $((40 + 2))"),
    ("What is 87 + 80?", False, "echo 87 + 80"),
    ("What is 13 + 29?", False, "13 + 29"),
    ("What is 55 + 11?", True, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo $((55 + 11))"),
]


@pytest.mark.slow
def test_every_reflection_of_the_embedded_model_fits_the_schema(embedded_server):
    _, info = embedded_server
    model = local_chat_model(info, "optimizer")
    scaffold = load_scaffold(REPO / "examples" / "arithmetic" / "scaffold")
    for n, (question, passed, command) in enumerate(RUNS):
        traj = _run(f"t-{n}", question, passed=passed, command=command)
        digest = Digest(
            traj,
            scaffold=scaffold,
            experience=None,
            hidden_tasks=(),
            with_eval=True,
            with_steps=True,
            prompts={traj.task_id: question},
        )
        schema = proposal_schema(scaffold, list(digest.candidates))
        proposal = reflect_structured(
            traj,
            scaffold=scaffold,
            domain_text="Each task is a question with one numeric answer.",
            model=model,
            experience=None,
            sandbox="bwrap",
            hidden_tasks=(),
            prompts={traj.task_id: question},
        )
        replies = [m for m in proposal.transcript if m["role"] == "ai"]
        assert replies, proposal.errors
        for reply in replies:  # decoded under the schema: always one it allows
            jsonschema.validate(json.loads(reply["content"]), schema)
        assert not any("not JSON" in e for e in proposal.errors)
        assert proposal.status in ("ok", "empty", "dropped")
        if proposal.status == "ok":
            apply(scaffold, proposal.ops)  # what it recorded applies (the dry run already said so)
        assert proposal.usage["output_tokens"] > 0
