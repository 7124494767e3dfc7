from pathlib import Path

import pytest

from recreate.optimizer.prompts import ops_reference
from recreate.optimizer.proposals import ProposalBox, propose_tool
from recreate.optimizer.synthesis import SizeBudget, apply_directly, scaffold_size
from recreate.scaffold import load_scaffold

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def minimal():
    return load_scaffold(REPO / "scaffolds" / "minimal")


RULE = {
    "op": "add_rule",
    "id": "lower",
    "text": "Answer in lowercase.",
    "rationale": "r",
    "evidence": ["t-1"],
}


def test_box_records_valid_ops(minimal):
    box = ProposalBox(minimal, "task-1", ["t-1"])
    reply = propose_tool(box).invoke({"ops": [RULE], "diagnosis": "case mismatch", "cause": "knowledge_gap"})
    assert "Recorded 1 op" in reply
    p = box.finish()
    assert p.status == "ok" and p.ops[0]["id"] == "lower" and p.cause == "knowledge_gap"
    assert "already recorded" in box.submit([RULE], "again")  # one proposal per run


def test_bad_ops_are_fed_back_once_then_dropped(minimal):
    box = ProposalBox(minimal, "task-1", ["t-1"])
    first = box.submit([{"op": "remove_rule", "id": "nope"}], "x")
    assert first.startswith("Rejected") and "one more attempt" in first
    second = box.submit('[{"op": "add_rul", "text": "x"}]', "x")
    assert "dropped" in second
    p = box.finish()
    assert p.status == "dropped" and len(p.errors) == 2 and "did you mean" in p.errors[1]


def test_silent_meta_agent_is_recorded(minimal):
    p = ProposalBox(minimal, "task-1", ["t-1"]).finish()
    assert p.status == "empty" and "without calling" in p.errors[0]


def test_size_budget_rejects_growth_and_collapse(minimal):
    size = scaffold_size(minimal)
    check = SizeBudget(max_chars=size + 50).checker(minimal)
    box = ProposalBox(minimal, "synthesis", [], check=check)
    big = {"op": "add_memory", "title": "t", "content": "x" * 200}
    assert "over the budget" in box.submit([big], "grow")
    shrink = {"op": "set_field", "field": "system_prompt", "value": "Solve it."}
    assert "under the floor" in box.submit([shrink], "shrink")
    assert box.finish().status == "dropped"


def test_apply_directly_stacks_and_skips_conflicts(minimal):
    from recreate.optimizer.proposals import Proposal

    a = Proposal(source="a", ops=[RULE], status="ok", trajectory_ids=["t-1"])
    b = Proposal(source="b", ops=[RULE], status="ok", trajectory_ids=["t-2"])  # same id: no longer applies
    c = Proposal(source="c", ops=[{"op": "add_rule", "text": "Check your work."}], status="ok")
    merged = apply_directly([a, b, c, Proposal(source="d", status="dropped")], scaffold=minimal)
    assert [op["text"] for op in merged.ops] == ["Answer in lowercase.", "Check your work."]
    assert len(merged.errors) == 1 and merged.errors[0].startswith("b:")


def test_ops_reference_lists_every_op():
    from recreate.scaffold.ops import OP_NAMES

    ref = ops_reference()
    assert all(f'"op": "{name}"' in ref for name in OP_NAMES)
