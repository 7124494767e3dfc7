"""Property: whatever a run's conversation holds, the tool turns shown to the caller form a conversation a
chat API accepts (every shown call answered, every shown result answering a shown call)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from recreate.agent.state import tool_turns

TASK = "t-1:task"


@st.composite
def runs(draw):
    """A run: system, task, then replies with 0-2 calls (some invalid), answers to some of the calls
    (some to ids no reply made), and stray human observations."""
    messages = [SystemMessage("sys", id="s"), HumanMessage("task", id=TASK)]
    for n in range(draw(st.integers(0, 6))):
        ids = [f"c{n}-{k}" for k in range(draw(st.integers(0, 2)))]
        invalid = draw(st.booleans())
        messages.append(
            AIMessage(
                "",
                id=f"a{n}",
                tool_calls=[{"name": "bash", "args": {}, "id": i} for i in ids],
                invalid_tool_calls=[{"name": "bash", "args": "{", "id": f"bad{n}", "error": None}]
                if invalid
                else [],
            )
        )
        answered = draw(st.lists(st.sampled_from([*ids, f"bad{n}", "stranger"]), unique=True))
        messages += [ToolMessage("out", tool_call_id=i, id=f"r{n}-{i}") for i in answered]
        if draw(st.booleans()):
            messages.append(HumanMessage("exit_code: 0", id=f"h{n}"))
    return messages


@given(runs())
def test_shown_tool_turns_are_always_a_valid_conversation(run):
    shown = tool_turns(run, TASK, "solver")
    open_calls: set[str] = set()
    for message in shown:
        if isinstance(message, AIMessage):
            assert not open_calls, "a reply shown before every call of the previous one was answered"
            assert message.name == "solver" and message.tool_calls and not message.invalid_tool_calls
            open_calls = {c["id"] for c in message.tool_calls}
        else:
            assert isinstance(message, ToolMessage) and message.tool_call_id in open_calls
            open_calls.discard(message.tool_call_id)
    assert not open_calls
    assert all(m.id != TASK and not isinstance(m, SystemMessage | HumanMessage) for m in shown)
