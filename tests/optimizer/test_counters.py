from pathlib import Path

from recreate.experience.schema import Evaluation, Trajectory
from recreate.optimizer.counters import memory_votes, retrieved_memory_ids
from recreate.scaffold import apply, load_scaffold

REPO = Path(__file__).resolve().parents[2]


def run(passed: bool, returned: str, tid: str) -> Trajectory:
    call = {"id": "c1", "type": "function", "function": {"name": "search_memory", "arguments": "{}"}}
    other = {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    return Trajectory(
        trajectory_id=tid,
        task_id="t",
        domain="d",
        messages=[
            {"role": "assistant", "content": "", "tool_calls": [call, other]},
            {"role": "tool", "tool_call_id": "c1", "content": returned},
            {"role": "tool", "tool_call_id": "c2", "content": "[m2] printed by a command, not retrieved"},
        ],
        evaluation=Evaluation(score=float(passed), passed=passed),
    )


def test_votes_follow_which_items_were_retrieved_and_the_outcome():
    scaffold = apply(
        load_scaffold(REPO / "scaffolds" / "minimal"),
        [
            {"op": "add_memory", "id": "m1", "title": "a", "content": "x"},
            {"op": "add_memory", "id": "m2", "title": "b", "content": "y"},
        ],
    )
    runs = [
        run(True, "[m1] a\nx\n\n[m9] gone\nz", "t-1"),
        run(False, "[m1] a\nx", "t-2"),
        run(True, "none", "t-3"),
    ]
    assert retrieved_memory_ids(runs[0]) == {"m1", "m9"}
    votes = memory_votes(scaffold, runs)
    assert votes == [
        {
            "op": "vote",
            "target": "memory",
            "id": "m1",
            "helpful": 1,
            "harmful": 1,
            "rationale": "retrieved in 1 passing and 1 failing run(s)",
            "evidence": ["t-1", "t-2"],
        }
    ]
    voted = apply(scaffold, votes)
    assert (voted.memory[0].helpful, voted.memory[0].harmful) == (1, 1)
