"""Helpful/harmful counters from evidence: which memory items a run retrieved, and whether it passed.

Every `search_memory` result the agent read names the items it returned (`[m3] title ...`). An item
retrieved in a passing run gets a helpful vote, in a failing run a harmful one. The votes go into the
round's patch (first, so a later op of the patch may still remove the item), with the runs as evidence;
the synthesis agent sees the counters when it decides what to promote or drop.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from recreate.experience.schema import Trajectory
from recreate.scaffold import Scaffold

_ITEM = re.compile(r"^\[([A-Za-z0-9][A-Za-z0-9_.-]*)\]", re.MULTILINE)


def retrieved_memory_ids(traj: Trajectory) -> set[str]:
    calls = {
        call.get("id")
        for m in traj.messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
        if (call.get("function") or {}).get("name") == "search_memory"
    }
    found: set[str] = set()
    for m in traj.messages:
        if m.get("role") == "tool" and m.get("tool_call_id") in calls and isinstance(m.get("content"), str):
            found |= set(_ITEM.findall(m["content"]))
    return found


def memory_votes(scaffold: Scaffold, trajectories: list[Trajectory]) -> list[dict[str, Any]]:
    known = {m.id for m in scaffold.memory}
    tally: dict[str, dict[str, Any]] = defaultdict(lambda: {"helpful": 0, "harmful": 0, "evidence": []})
    for traj in trajectories:
        passed = bool(traj.evaluation and traj.evaluation.passed)
        for item in sorted(retrieved_memory_ids(traj) & known):
            tally[item]["helpful" if passed else "harmful"] += 1
            tally[item]["evidence"].append(traj.trajectory_id)
    return [
        {
            "op": "vote",
            "target": "memory",
            "id": item,
            "helpful": t["helpful"],
            "harmful": t["harmful"],
            "rationale": f"retrieved in {t['helpful']} passing and {t['harmful']} failing run(s)",
            "evidence": t["evidence"],
        }
        for item, t in sorted(tally.items())
    ]
