"""The structured protocol: one constrained call over an evidence digest, checked on the real requests it
sends to a local OpenAI-compatible server (the scripted replies stand in for the model's choices)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from recreate.experience.schema import Evaluation, ModelInfo, Outcome, Trajectory
from recreate.experience.store import ExperienceStore
from recreate.models import make_chat_model
from recreate.optimizer import prompts
from recreate.optimizer.proposals import Proposal
from recreate.optimizer.protocol import resolve_protocol
from recreate.optimizer.structured import (
    Digest,
    proposal_schema,
    reflect_structured,
    synthesize_structured,
    task_text,
)
from recreate.scaffold import apply, load_scaffold
from recreate.testing import text
from tests.experience.factory import bash_step

REPO = Path(__file__).resolve().parents[2]
MARKER = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo $((40 + 2))"


def _run(task_id: str, question: str, *, passed: bool, command: str = MARKER) -> Trajectory:
    return Trajectory(
        task_id=task_id,
        domain="math",
        model=ModelInfo(name="scripted"),
        messages=[
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "What is 3 + 4?", "name": "example"},
            {"role": "user", "content": question},
        ],
        steps=[bash_step(0, command, stdout="COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n42")],
        outcome=Outcome(exit_status="submitted", submission="42"),
        evaluation=Evaluation(score=float(passed), passed=passed, feedback="correct" if passed else "wrong"),
    )


@pytest.fixture
def scaffold():
    return load_scaffold(REPO / "examples" / "arithmetic" / "scaffold")


def _reflect(traj: Trajectory, scaffold, url: str, experience=None, hidden=()) -> Proposal:
    return reflect_structured(
        traj,
        scaffold=scaffold,
        domain_text="Tasks with one answer each.",
        model=make_chat_model(f"scripted@{url}", role="optimizer"),
        experience=experience,
        sandbox="bwrap",
        hidden_tasks=hidden,
        prompts={traj.task_id: task_text(traj)},
    )


def test_a_passing_run_becomes_a_worked_example_through_the_schema(openai_server, scaffold):
    traj = _run("t-40", "What is 40 + 2?", passed=True)
    reply = {
        "diagnosis": "R1 solved it in one direct step.",
        "cause": "none",
        "ops": [{"op": "add_example", "run": "R1"}],
    }
    openai_server.enqueue(text(json.dumps(reply)))
    proposal = _reflect(traj, scaffold, openai_server.url)

    request = openai_server.requests[0]
    schema = request["response_format"]["json_schema"]["schema"]
    assert request["response_format"]["type"] == "json_schema" and "tools" not in request
    jsonschema.validate(reply, schema)  # what the model was constrained to
    digest = request["messages"][1]["content"]
    assert "What is 40 + 2?" in digest and MARKER in digest and "score 1 (passed)" in digest
    assert proposal.status == "ok" and proposal.protocol == "structured"
    (op,) = proposal.ops
    assert op["op"] == "add_example" and op["task"] == "What is 40 + 2?"
    assert op["steps"] == [{"command": MARKER, "output": "", "submit": None}]
    assert traj.trajectory_id in proposal.evidence
    assert [m["role"] for m in proposal.transcript] == ["system", "human", "ai"]
    assert len(apply(scaffold, proposal.ops).examples) == len(scaffold.examples) + 1


def test_the_schema_offers_only_what_this_scaffold_and_evidence_allow(scaffold):
    schema = proposal_schema(scaffold, [])
    variants = schema["properties"]["ops"]["items"]["anyOf"]
    assert {v["properties"]["op"]["const"] for v in variants} == {
        "add_rule",
        "add_memory",
    }  # no rules, no run
    with_rules = apply(scaffold, [{"op": "add_rule", "id": "r7", "text": "Check the answer."}])
    variants = proposal_schema(with_rules, ["R1", "R3"])["properties"]["ops"]["items"]["anyOf"]
    by_op = {v["properties"]["op"]["const"]: v for v in variants}
    assert by_op["remove_rule"]["properties"]["id"]["enum"] == ["r7"]
    assert by_op["add_example"]["properties"]["run"]["enum"] == ["R1", "R3"]
    good = {"diagnosis": "A clean pass, nothing to change.", "cause": "none", "ops": []}
    jsonschema.validate(good, schema)
    for bad in (
        good | {"ops": [{"op": "add_rule", "text": "Check."}] * 3},  # too many ops
        good | {"ops": [{"op": "add_example", "run": "R9"}]},  # a run the digest did not offer
        good | {"diagnosis": "12345678901234"},  # digit soup, not a sentence
        good | {"cause": "bad luck"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, proposal_schema(with_rules, ["R1"]))


def test_no_change_is_a_stated_empty_proposal(openai_server, scaffold):
    openai_server.enqueue(
        text(json.dumps({"diagnosis": "A clean pass the examples already show.", "cause": "none", "ops": []}))
    )
    proposal = _reflect(_run("t-40", "What is 40 + 2?", passed=True), scaffold, openai_server.url)
    assert proposal.status == "empty" and not proposal.errors
    assert proposal.diagnosis == "A clean pass the examples already show."


def test_a_rejected_proposal_is_fed_back_once_then_dropped(openai_server, scaffold):
    ruled = apply(scaffold, [{"op": "add_rule", "id": "r7", "text": "Check the answer."}])
    twice = {
        "diagnosis": "The rule misled it.",
        "cause": "other",
        "ops": [{"op": "remove_rule", "id": "r7"}] * 2,
    }
    openai_server.enqueue(text(json.dumps(twice)), text("not json at all"))
    proposal = _reflect(_run("t-40", "What is 40 + 2?", passed=False), ruled, openai_server.url)
    assert proposal.status == "dropped" and len(proposal.errors) == 2
    assert "unknown rule 'r7'" in proposal.errors[0] and "not JSON" in proposal.errors[1]
    feedback = openai_server.requests[1]["messages"][-1]["content"]
    assert feedback.startswith("Rejected") and "r7" in feedback
    assert len(openai_server.requests) == 2


def test_the_digest_shows_similar_training_runs_and_never_held_out_ones(recreate_home, scaffold):
    store = ExperienceStore(recreate_home / "experience", embedding="hash")
    traj = _run("train-1", "What is 40 + 2?", passed=False, command="40 + 2")
    store.add(traj)
    store.add(_run("train-2", "What is 41 + 2?", passed=True))
    store.add(_run("val-1", "What is 42 + 2? HELD-OUT-TEXT", passed=True))
    prompts = {"train-1": "What is 40 + 2?", "train-2": "What is 41 + 2?"}
    digest = Digest(
        traj, scaffold=scaffold, experience=store, hidden_tasks={"val-1"}, with_eval=True, with_steps=True,
        prompts=prompts,
    )  # fmt: skip
    assert "What is 41 + 2?" in digest.text and "HELD-OUT-TEXT" not in digest.text
    assert list(digest.candidates) == ["R2"]  # the failing run itself is no example; its passing neighbour is
    blind = Digest(
        traj, scaffold=scaffold, experience=store, hidden_tasks={"val-1"}, with_eval=False, with_steps=False
    )
    assert "40 + 2\n" not in blind.text and "evaluator:" not in blind.text and "score 0" in blind.text


def test_synthesis_chooses_among_the_proposed_ops_and_keeps_a_repeat_once(openai_server, scaffold):
    rule = {"op": "add_rule", "text": "Print the value, not the expression.", "evidence": ["t-1"]}
    proposals = [
        Proposal(source="a", status="ok", ops=[rule], trajectory_ids=["t-1"], diagnosis="printed 40 + 2"),
        Proposal(source="b", status="ok", ops=[rule | {"evidence": ["t-2"]}], trajectory_ids=["t-2"]),
    ]
    openai_server.enqueue(
        text(json.dumps({"rationale": "Both runs printed the expression.", "keep": ["P1.1", "P2.1"]}))
    )
    patch = synthesize_structured(
        proposals,
        scaffold=scaffold,
        domain_text="Tasks.",
        model=make_chat_model(f"scripted@{openai_server.url}", role="synthesis"),
        sandbox="bwrap",
        check=None,
        outcomes={"a": {"score": 0.0}, "b": {"score": 0.0}},
    )
    schema = openai_server.requests[0]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["keep"]["items"]["enum"] == ["P1.1", "P2.1"]
    assert patch.status == "ok" and patch.ops[0]["text"] == rule["text"] and len(patch.ops) == 1


def test_auto_chooses_structured_only_for_a_model_known_not_to_call_tools(openai_server):
    model = make_chat_model(f"scripted@{openai_server.url}", role="optimizer")
    assert resolve_protocol("auto", model) == "agentic"
    model.metadata = {"tool_calls": False}
    assert resolve_protocol("auto", model) == "structured"
    assert resolve_protocol("agentic", model) == "agentic"
    with pytest.raises(ValueError, match="unknown optimizer protocol"):
        resolve_protocol("telepathy", model)


DOMAIN_WORDS = (
    "math",
    "arithmetic",
    "ds1000",
    "ds-1000",
    "jsonl",
    "repo",
    "swe",
    "pytest",
    "numpy",
    "pandas",
    "sum",
    "addition",
    "boxed",
)


@pytest.mark.parametrize(
    "name",
    [
        "REFLECT",
        "GUIDANCE",
        "SYNTHESIZE",
        "BOOTSTRAP",
        "STRUCTURED_REFLECT",
        "STRUCTURED_EXAMPLES",
        "STRUCTURED_SYNTHESIZE",
    ],
)
def test_the_optimizer_prompts_are_domain_free(name):
    """One set of templates serves every domain: the domain enters only through {domain}."""
    template = getattr(prompts, name).lower()
    named = [w for w in DOMAIN_WORDS if re.search(rf"\b{re.escape(w)}\b", template)]
    assert not named, f"{name} names a domain: {named}"


def test_a_reply_outside_the_schema_is_recorded_never_raised(openai_server, scaffold):
    """An endpoint that takes response_format without enforcing it: a label never offered, an op that is
    not an object. The reflection records both, fed back once, and the round goes on."""
    outside = {
        "diagnosis": "Keep the other run.",
        "cause": "none",
        "ops": [{"op": "add_example", "run": "R7"}],
    }
    openai_server.enqueue(text(json.dumps(outside)), text(json.dumps(outside | {"ops": ["add_rule"]})))
    proposal = _reflect(_run("t-40", "What is 40 + 2?", passed=True), scaffold, openai_server.url)
    assert proposal.status == "dropped" and len(proposal.errors) == 2
    assert all("does not fit the schema at ops/0" in e for e in proposal.errors)
    assert [m["role"] for m in proposal.transcript] == ["system", "human", "ai", "human", "ai"]
    patch = synthesize_structured(
        [Proposal(source="a", status="ok", ops=[{"op": "add_rule", "text": "Check the answer twice."}])],
        scaffold=scaffold,
        domain_text="Tasks.",
        model=make_chat_model(f"scripted@{openai_server.url}", role="synthesis"),
        sandbox="bwrap",
        check=None,
        outcomes={},
    )
    assert patch.status == "dropped"  # the scripted server had no reply left: both asks were refused


def test_a_worked_example_shows_the_raw_task_and_not_under_the_no_trajectory_ablation(
    openai_server, scaffold
):
    wrapped = scaffold.model_copy(update={"instance_template": "Problem:\n{{ task }}\nAnswer with a number."})
    traj = _run("t-40", "Problem:\nWhat is 40 + 2?\nAnswer with a number.", passed=True)
    prompts = {"t-40": "What is 40 + 2?"}
    digest = Digest(
        traj,
        scaffold=wrapped,
        experience=None,
        hidden_tasks=(),
        with_eval=True,
        with_steps=True,
        prompts=prompts,
    )
    assert digest.candidates["R1"][1] == "What is 40 + 2?"  # shown through the template once, not twice
    blind = Digest(
        traj,
        scaffold=wrapped,
        experience=None,
        hidden_tasks=(),
        with_eval=True,
        with_steps=False,
        prompts=prompts,
    )
    assert not blind.candidates  # the ablation hides the steps: it may not copy them either
    unknown = Digest(
        traj, scaffold=wrapped, experience=None, hidden_tasks=(), with_eval=True, with_steps=True, prompts={}
    )
    assert not unknown.candidates  # a run of a task this run does not train on is never an example
    shown = apply(wrapped, [{"op": "add_example", "task": "What is 40 + 2?", "steps": [{"submit": "42"}]}])
    again = Digest(
        traj,
        scaffold=shown,
        experience=None,
        hidden_tasks=(),
        with_eval=True,
        with_steps=True,
        prompts=prompts,
    )
    assert not again.candidates  # already an example


def test_a_run_from_before_the_new_settings_resumes_without_force():
    from recreate.optimizer.optimizer import config_differences

    old = {"evolve": {"seed": 0, "rounds": 2}, "train": ["a"], "val": ["b"]}
    new = {
        "evolve": {"seed": 0, "rounds": 2, "optimizer_protocol": "auto", "test_seeds": 2},
        "train": ["a"], "val": ["b"], "test": ["c"],
    }  # fmt: skip
    assert config_differences(old, new) == []
    assert config_differences(new, new | {"evolve": new["evolve"] | {"test_seeds": 0}}) == [
        "evolve.test_seeds"
    ]
