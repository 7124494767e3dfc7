"""The ReCreate-Agent's view of a run under each ablation, checked on the real requests it sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.experience.schema import Evaluation, Outcome, Trajectory
from recreate.experience.store import ExperienceStore
from recreate.models import make_chat_model
from recreate.optimizer.proposals import Proposal
from recreate.optimizer.reflect import Ablations, reflect_on_run
from recreate.scaffold import load_scaffold
from recreate.testing import Reply, text, tool_call
from tests.experience.factory import bash_step
from tests.optimizer.script import EVALUATOR, GOOD_OPS, WORDS

REPO = Path(__file__).resolve().parents[2]
FEEDBACK = "expected 'alpha', got 'Alpha': answers must match exactly"


@pytest.fixture
def run(recreate_home):
    store = ExperienceStore(recreate_home / "experience", embedding="hash")
    traj = Trajectory(
        task_id="alpha",
        domain="jsonl",
        outcome=Outcome(exit_status="submitted", submission="Alpha"),
        evaluation=Evaluation(score=0.0, passed=False, feedback=FEEDBACK),
    )
    store.add(traj)
    return traj, store


def _reflect(traj: Trajectory, store: ExperienceStore, url: str, ablations: Ablations) -> Proposal:
    """The ReCreate-Agent on the words domain's first task, with the scripted endpoint at `url`."""
    domain = get_domain("jsonl", data=WORDS / "tasks.jsonl", evaluator=EVALUATOR)
    return reflect_on_run(
        traj,
        scaffold=load_scaffold(REPO / "scaffolds" / "minimal"),
        domain=domain,
        task=domain.tasks()[0],
        model=make_chat_model(f"scripted@{url}", role="optimizer"),
        experience=store,
        sandbox="bwrap",
        ablations=ablations,
    )


@pytest.mark.parametrize(
    ("ablations", "absent", "present"),
    [
        (Ablations(), set(), {"read_trajectory", "run_in_environment", "test_tool", "search_experience"}),
        (Ablations(no_trajectory=True), {"read_trajectory", "compare"}, {"run_in_environment"}),
        (Ablations(no_environment=True), {"run_in_environment", "test_tool"}, {"read_trajectory"}),
        (Ablations(no_eval_details=True), set(), {"read_trajectory"}),
        (Ablations(no_guidance=True), set(), {"propose"}),
    ],
)
def test_ablations_change_what_the_meta_agent_sees(run, openai_server, ablations, absent, present):
    traj, store = run
    openai_server.enqueue(tool_call("propose", {"ops": GOOD_OPS[:1], "diagnosis": "case"}), text("done"))
    proposal = _reflect(traj, store, openai_server.url, ablations)
    assert proposal.status == "ok" and proposal.ops[0]["id"] == "lower"
    first = openai_server.requests[0]
    tools = {t["function"]["name"] for t in first["tools"]}
    assert present <= tools and not absent & tools
    system, brief = first["messages"][0]["content"], first["messages"][1]["content"]
    assert ("How to write good edits" in system) is not ablations.no_guidance
    assert '"op": "add_rule"' in system  # the op reference is the API: no ablation takes it away
    assert (FEEDBACK in brief) is not ablations.no_eval_details
    assert "score=0.0" in brief  # the outcome itself is always visible


@pytest.mark.parametrize("hidden", [False, True])
def test_no_eval_details_hides_feedback_from_the_inspection_tools(run, openai_server, hidden):
    traj, store = run
    openai_server.enqueue(
        tool_call("read_trajectory", {"trajectory_id": traj.trajectory_id, "view": "evaluation"}),
        tool_call("propose", {"ops": [], "diagnosis": "nothing", "cause": "none"}),
        text("done"),
    )
    _reflect(traj, store, openai_server.url, Ablations(no_eval_details=hidden))
    view = next(m["content"] for m in openai_server.requests[1]["messages"] if m["role"] == "tool")
    assert ("must match exactly" in view) is not hidden
    assert ("not available" in view) is hidden


def test_no_trajectory_also_closes_step_search(run, openai_server):
    traj, store = run
    step = traj.model_copy(
        update={
            "trajectory_id": "t-steps",
            "steps": [bash_step(0, "cat secret_step_output.txt", stdout="STEP-CONTENT-XYZ")],
        }
    )
    store.add(step)
    openai_server.enqueue(
        tool_call("search_experience", {"query": "STEP-CONTENT-XYZ cat", "scope": "steps"}),
        tool_call("search_experience", {"query": "STEP-CONTENT-XYZ cat", "scope": "summaries"}),
        tool_call("propose", {"ops": [], "diagnosis": "nothing", "cause": "none"}),
        text("done"),
    )
    _reflect(traj, store, openai_server.url, Ablations(no_trajectory=True))
    first = openai_server.requests[0]
    search = next(t for t in first["tools"] if t["function"]["name"] == "search_experience")
    assert "steps" not in search["function"]["parameters"]["properties"]["scope"]["description"]
    replies = [m["content"] for m in openai_server.requests[-1]["messages"] if m["role"] == "tool"]
    assert "not available" in replies[0] and "STEP-CONTENT-XYZ" not in replies[0]
    assert "t-steps" in replies[1] or traj.trajectory_id in replies[1]  # run-level search still works
    assert not any("STEP-CONTENT-XYZ" in r for r in replies)


def test_a_conversation_outgrowing_the_context_keeps_what_the_meta_agent_proposed(run, openai_server):
    traj, store = run
    overflow = "request (4141 tokens) exceeds the available context size (4096 tokens), try increasing it"
    openai_server.enqueue(
        tool_call("propose", {"ops": GOOD_OPS[:1], "diagnosis": "case"}), Reply(status=400, error=overflow)
    )
    proposal = _reflect(traj, store, openai_server.url, Ablations())
    assert proposal.status == "ok" and proposal.ops[0]["id"] == "lower"  # submitted before the overflow
    assert len(proposal.errors) == 1 and "4096 tokens" in proposal.errors[0]
    assert proposal.errors[0].startswith("the meta-agent's conversation outgrew the model's context")
