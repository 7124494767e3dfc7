"""recreate.testing.behaviours: the scripted roles of the `loop` behaviour and how a behaviour is chosen."""

from __future__ import annotations

from pathlib import Path

import pytest

from recreate.testing.behaviours import LOOP_ANSWER, load_responder

REPO = Path(__file__).resolve().parents[2]


def tools(*names: str) -> list[dict]:
    return [{"type": "function", "function": {"name": n, "parameters": {}}} for n in names]


def request(*roles: str, offered: tuple[str, ...] = (), system: str = "You solve tasks.") -> dict:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Task."}]
    messages += [{"role": role, "content": "..."} for role in roles]
    return {"messages": messages, "tools": tools(*offered)}


def test_loop_agent_runs_a_command_then_submits_in_either_action_format() -> None:
    respond = load_responder("loop")
    first = respond(request(offered=("bash", "submit")))
    assert first.tool_calls == [{"name": "bash", "arguments": {"command": "ls"}}]
    later = respond(request("assistant", "tool", offered=("bash", "submit")))
    assert later.tool_calls == [{"name": "submit", "arguments": {"answer": LOOP_ANSWER}}]
    text_format = "Reply with exactly one fenced block:\n```submit\n<final answer>\n```"
    assert "```bash\nls\n```" in respond(request(system=text_format)).content
    assert (
        f"```submit\n{LOOP_ANSWER}\n```" in respond(request("assistant", "user", system=text_format)).content
    )


def test_loop_optimizer_roles_propose_one_fresh_rule_each_time_then_stop() -> None:
    respond = load_responder("loop")
    proposal = respond(request(offered=("read_trajectory", "propose")))
    patch = respond(request(offered=("submit_patch",)))
    assert [r.tool_calls[0]["name"] for r in (proposal, patch)] == ["propose", "submit_patch"]
    rules = [r.tool_calls[0]["arguments"]["ops"][0] for r in (proposal, patch)]
    assert all(rule["op"] == "add_rule" for rule in rules) and rules[0]["id"] != rules[1]["id"]
    assert respond(request("assistant", "tool", offered=("propose",))).content == "done"
    assert respond(request()).content == "ok"  # a plain chat (a router, a question)


def test_a_responder_is_chosen_by_name_or_by_function(tmp_path: Path) -> None:
    assert load_responder("ok")(request()).content == "ok"
    words = load_responder(str(REPO / "tests" / "optimizer" / "script.py") + ":responder")
    assert words(request(offered=("bash", "submit"))).tool_calls[0]["name"] == "bash"
    assert load_responder("recreate.testing.behaviours:loop_responder")  # module:function
    for bad, message in (
        ("nonsense", "use loop, ok, MODULE:FUNCTION or FILE.py:FUNCTION"),
        (f"{tmp_path}/missing.py:f", "no file"),
        ("recreate.testing.behaviours:nothing_here", "has no function 'nothing_here'"),
    ):
        with pytest.raises(ValueError, match=message):
            load_responder(bad)
