"""Scripted LLM choices for evolve tests on the `words` domain (stateless: decided from the request).

- The domain agent answers "Reply with the word: Alpha" with "Alpha" (wrong: answers are lowercase),
  "alpha" once the scaffold has the `lower` rule, and "ALPHA" once it has the `upper` rule.
- The ReCreate-Agent reads the trajectory; for a failed run it looks around the task's environment, tests
  a `lowercase` tool in the sandbox and proposes the rule and the tool; for a passed run it proposes the
  (regressing) `upper` rule.
- The synthesis agent merges the proposals it is given, dropping duplicates.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from recreate.testing import Reply, text, tool_call

WORDS = Path(__file__).parent / "words"
EVALUATOR = "python3 /evaluator/evaluate.py"
# The words tasks have 3 validation tasks: all three improving is a sign-flip p of 1/8, so the runs that
# test the loop's mechanics state that level (the default, 0.025, needs 6 tasks: tests/evaluation).
GATE_ALPHA = 0.125
LOWER_CODE = "import json, sys\nprint(json.loads(sys.argv[1])['text'].lower())\n"
GOOD_OPS = [
    {
        "op": "add_rule",
        "id": "lower",
        "text": "Answer in lowercase.",
        "rationale": "answers must be lowercase",
    },
    {
        "op": "add_tool",
        "name": "lowercase",
        "description": "Lowercase a text.",
        "language": "python",
        "code": LOWER_CODE,
        "args": {"type": "object", "properties": {"text": {"type": "string"}}},
        "smoke": {"args": {"text": "ABC"}, "expect": "abc"},
        "rationale": "recurring conversion",
    },
]
BAD_OPS = [{"op": "add_rule", "id": "upper", "text": "Answer in UPPERCASE.", "rationale": "emphasis"}]


def _content(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    return content if isinstance(content, str) else " ".join(part.get("text", "") for part in content)


def responder(body: dict[str, Any]) -> Reply:
    messages = body["messages"]
    system = _content(messages[0]) if messages and messages[0]["role"] == "system" else ""
    turn = sum(m["role"] == "assistant" for m in messages)
    if "ReCreate-Agent" in system:
        return _reflect(messages, turn)
    if "synthesis agent" in system:
        return _synthesize(messages, turn)
    return _agent(system, messages, turn)


def _agent(system: str, messages: list[dict[str, Any]], turn: int) -> Reply:
    if turn == 0:
        return tool_call("bash", {"command": "echo ready"})
    task = next(_content(m) for m in messages if m["role"] == "user")
    word = re.search(r"Reply with the word: (\w+)", task).group(1)
    if "Answer in UPPERCASE." in system:
        word = word.upper()
    elif "Answer in lowercase." in system:
        word = word.lower()
    return tool_call("submit", {"answer": word})


def _reflect(messages: list[dict[str, Any]], turn: int) -> Reply:
    brief = next(_content(m) for m in messages if m["role"] == "user")
    traj_id = re.search(r"trajectory id\): (\S+?)\.", brief).group(1)
    passed = "passed=True" in brief
    if turn == 0:
        return tool_call("read_trajectory", {"trajectory_id": traj_id, "view": "index"})
    if turn == 1 and not passed:
        return tool_call("run_in_environment", {"command": "echo env-ok && ls -a"})
    if turn == 2 and not passed:
        return tool_call(
            "test_tool",
            {"name": "lowercase", "language": "python", "code": LOWER_CODE, "args": {"text": "ABC"}},
        )
    if not any("Recorded" in _content(m) for m in messages if m["role"] == "tool"):
        ops = BAD_OPS if passed else GOOD_OPS
        cause = "none" if passed else "knowledge_gap"
        return tool_call("propose", {"ops": ops, "diagnosis": "case of the answer", "cause": cause})
    return text("done")


def _synthesize(messages: list[dict[str, Any]], turn: int) -> Reply:
    if turn > 0:
        return text("merged")
    listing = _content(next(m for m in messages if m["role"] == "user")).split("\n", 1)[1]
    merged: dict[str, dict[str, Any]] = {}
    for proposal in json.loads(listing):
        for op in proposal["ops"]:
            merged.setdefault(f"{op['op']}:{op.get('id') or op.get('name')}", op)
    return tool_call("submit_patch", {"ops": list(merged.values()), "diagnosis": "recurring lesson"})
