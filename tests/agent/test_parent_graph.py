"""The domain agent as a node of a user's LangGraph app: the parent's conversation gets the user's turns
and the agent's answers, never its prompts; its steps stay visible to streaming and in the trajectory."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

import pytest
from langchain_core.messages import AIMessage, SystemMessage, ToolMessage, convert_to_openai_messages
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph

from recreate import create_domain_agent
from recreate.agent import build_domain_agent
from recreate.experience.schema import load_trajectory
from recreate.scaffold import load_scaffold
from recreate.testing import text, tool_call
from tests.agent.conftest import MINIMAL

pytestmark = pytest.mark.bwrap
OUTPUT_KEYS = {"messages", "submission", "exit_status", "trajectory_id"}


def _agent(server, sandbox, tmp_path, scaffold=MINIMAL, **options):
    model = f"scripted@{server.url}"
    return create_domain_agent(scaffold, model=model, sandbox=sandbox, trajectory_dir=tmp_path, **options)


def _parent(agent, checkpointer, context_schema=None):
    parent = StateGraph(MessagesState, context_schema=context_schema)
    parent.add_node("domain_agent", agent)
    parent.add_edge(START, "domain_agent")
    return parent.compile(checkpointer=checkpointer)


def _assert_valid_chat(messages) -> None:
    """What a provider accepts: a system message only first, each tool message answering a call of the
    assistant message before it (or of the tool messages answering that one)."""
    assert not any(isinstance(m, SystemMessage) for m in messages[1:])
    calls: set[str] = set()
    for message in messages:
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in calls
        else:
            calls = {c["id"] for c in getattr(message, "tool_calls", [])}
    convert_to_openai_messages(messages)


def test_two_turns_leave_only_the_users_messages_and_the_agents_answers(openai_server, bwrap, tmp_path):
    openai_server.enqueue(
        tool_call("bash", {"command": "echo $((3+4))"}), tool_call("submit", {"answer": "7"}),
        tool_call("submit", {"answer": "second"}),
    )  # fmt: skip
    agent = _agent(openai_server, bwrap, tmp_path / "traj")
    with sqlite3.connect(tmp_path / "ckpt.sqlite", check_same_thread=False) as conn:
        app = _parent(agent, SqliteSaver(conn))
        config = {"configurable": {"thread_id": "thread-1"}}
        app.invoke({"messages": [("user", "What is 3+4?")]}, config)
        app.invoke({"messages": [("user", "And now?")]}, config)
        stored = app.get_state(config).values["messages"]
    assert [m.type for m in stored] == ["human", "ai", "human", "ai"]
    assert [m.content for m in stored] == ["What is 3+4?", "7", "And now?", "second"]
    assert all(m.name == "minimal" and not m.tool_calls for m in stored if isinstance(m, AIMessage))
    _assert_valid_chat(stored)
    # the second run's model call saw only its own run: its system prompt and the new task
    sent = openai_server.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"] and sent[1]["content"] == "And now?"
    # every internal step is in the trajectories
    trajectories = [load_trajectory(p) for p in sorted((tmp_path / "traj").glob("*.json"))]
    run = ["system", "user", "assistant", "tool"]
    assert sorted([m["role"] for m in t.messages] for t in trajectories) == [run, [*run, "assistant", "tool"]]
    first = next(t for t in trajectories if t.steps[0].action["tool"] == "bash")
    assert first.steps[0].observation.stdout == "7\n" and first.outcome.submission == "7"


def test_streaming_with_subgraphs_still_shows_the_agents_steps(openai_server, bwrap, tmp_path):
    openai_server.enqueue(tool_call("bash", {"command": "echo hi"}), tool_call("submit", {"answer": "hi"}))
    app = _parent(_agent(openai_server, bwrap, tmp_path), InMemorySaver())
    chunks = list(
        app.stream(
            {"messages": [("user", "Say hi")]},
            {"configurable": {"thread_id": "s"}},
            stream_mode="updates",
            subgraphs=True,
        )
    )
    inner = [(node, update) for ns, chunk in chunks if ns for node, update in chunk.items()]
    assert [node for node, _ in inner] == ["start", "step", "step", "finish"]
    started = inner[0][1]["messages"]
    assert [m.type for m in started] == ["system", "human"] and started[1].content == "Say hi"
    reply, observation = inner[1][1]["messages"]
    assert reply.tool_calls[0]["args"] == {"command": "echo hi"}
    assert observation.content.startswith("exit_code: 0\nstdout:\nhi")
    outer = [chunk["domain_agent"] for ns, chunk in chunks if not ns]
    assert len(outer) == 1 and [m.type for m in outer[0]["messages"]] == ["human", "ai"]


def test_tool_messages_option_adds_only_answered_tool_turns(openai_server, bwrap, tmp_path):
    openai_server.enqueue(
        tool_call(
            "bash", '{"command": "ls'
        ),  # arguments are not JSON: an invalid call, answered with an error
        tool_call("bash", {"command": "echo 5"}),
        tool_call("submit", {"answer": "5"}),
    )
    app = _parent(_agent(openai_server, bwrap, tmp_path, tool_messages=True), InMemorySaver())
    out = app.invoke({"messages": [("user", "Five?")]}, {"configurable": {"thread_id": "t"}})
    messages = out["messages"]
    assert [m.type for m in messages] == ["human", "ai", "tool", "ai", "tool", "ai"]
    assert messages[1].tool_calls[0]["args"] == {"command": "echo 5"} and "5" in messages[2].content
    assert messages[3].tool_calls[0]["name"] == "submit" and messages[-1].content == "5"
    assert {m.name for m in messages if isinstance(m, AIMessage)} == {"minimal"}
    _assert_valid_chat(messages)


def test_tool_messages_needs_the_tool_call_format(openai_server, bwrap, tmp_path):
    with pytest.raises(ValueError, match="tool_messages=True needs action_format='tool_calls'"):
        _agent(openai_server, bwrap, tmp_path, tool_messages=True, action_format="text")


def test_a_run_without_an_answer_says_why_in_one_message(openai_server, bwrap, tmp_path):
    openai_server.responder = lambda body: text("thinking, no action")
    base = load_scaffold(MINIMAL)
    scaffold = base.model_copy(
        update={"name": "my.solver", "limits": base.limits.model_copy(update={"max_steps": 2})}
    )
    out = _agent(openai_server, bwrap, tmp_path, scaffold=scaffold).invoke({"task": "anything"})
    assert set(out) == OUTPUT_KEYS and out["exit_status"] == "max_steps" and out["submission"] is None
    [answer] = out["messages"]
    assert answer.name == "my_solver"  # a name chat APIs accept
    assert answer.content.startswith("The agent stopped without an answer (max_steps: step limit reached")


@dataclass
class AppContext:
    user_id: str = "u1"


def test_a_checkpointed_thread_reads_each_runs_own_task_under_a_parent_context(
    openai_server, bwrap, tmp_path
):
    """Standalone with its own checkpointer, a second run on the thread must not reuse the first task;
    under a parent with a context of its own (which subgraphs inherit) the agent still runs."""
    openai_server.enqueue(tool_call("submit", {"answer": "a"}), tool_call("submit", {"answer": "b"}))
    agent = _agent(openai_server, bwrap, tmp_path, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "solo"}}
    agent.invoke({"task": "first task"}, config)
    second = agent.invoke({"messages": [("user", "second task")]}, config)
    assert openai_server.requests[-1]["messages"][-1]["content"] == "second task"
    assert second["submission"] == "b"

    openai_server.enqueue(tool_call("submit", {"answer": "c"}))
    app = _parent(_agent(openai_server, bwrap, tmp_path), InMemorySaver(), AppContext)
    out = app.invoke(
        {"messages": [("user", "third")]}, {"configurable": {"thread_id": "p"}}, context=AppContext()
    )
    assert [m.content for m in out["messages"]] == ["third", "c"]


def test_the_runtime_gives_the_trajectory_of_a_public_graphs_output(openai_server, bwrap, tmp_path):
    openai_server.enqueue(tool_call("bash", {"command": "echo 1"}), tool_call("submit", {"answer": "1"}))
    agent = build_domain_agent(
        MINIMAL, model=f"scripted@{openai_server.url}", sandbox=bwrap, trajectory_dir=tmp_path
    )
    out = agent.compile().invoke({"task": "One?"})
    traj = agent.trajectory(out)
    assert traj.trajectory_id == out["trajectory_id"] and len(traj.steps) == 2
    assert [m["role"] for m in traj.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]

    unrecorded = build_domain_agent(
        MINIMAL, model=f"scripted@{openai_server.url}", sandbox=bwrap, record=False
    )
    openai_server.enqueue(tool_call("submit", {"answer": "2"}))
    out = unrecorded.compile().invoke({"task": "Two?"})
    with pytest.raises(ValueError, match="compile\\(public=False\\) or record to a trajectory_dir"):
        unrecorded.trajectory(out)
