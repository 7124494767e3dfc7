"""ScaffoldMiddleware on an agent built with langchain's create_agent, through the real openai client."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from recreate.agent.middleware import ScaffoldMiddleware
from recreate.testing import tool_call

pytestmark = pytest.mark.bwrap


@tool
def lookup_unit(name: str) -> str:
    """The user's own tool, kept beside the scaffold's."""
    return f"{name}: metres"


def test_middleware_applies_prompt_rules_memory_and_tools_to_an_existing_agent(
    openai_server, bwrap, tooled_scaffold
):
    tooled_scaffold.rules.append(_rule())
    openai_server.enqueue(
        tool_call("lookup_unit", {"name": "height"}),
        tool_call("add_numbers", {"a": 40, "b": 2}),
        tool_call("bash", {"command": "cat .recreate_tools/add_numbers/main.py | wc -l"}),
        tool_call("submit", {"answer": "42"}),
    )
    middleware = ScaffoldMiddleware(tooled_scaffold, sandbox=bwrap)
    model = ChatOpenAI(model="scripted", base_url=openai_server.url, api_key="x", max_retries=0)
    agent = create_agent(model, tools=[lookup_unit], system_prompt="Answer tersely.", middleware=[middleware])
    out = agent.invoke({"messages": [("user", "What is 40 + 2?")]})

    system = openai_server.requests[0]["messages"][0]["content"]
    assert system.startswith("You are an agent that solves tasks")  # scaffold prompt first
    assert "[r-test] Always double-check arithmetic." in system  # rules
    assert "[m1] Pandas groupby keeps NaN keys out" in system  # memory index
    assert system.endswith("Answer tersely.")  # the agent's own prompt kept
    names = {t["function"]["name"] for t in openai_server.requests[0]["tools"]}
    assert names == {"lookup_unit", "bash", "add_numbers", "search_memory", "submit"}
    contents = [m.content for m in out["messages"]]
    assert "height: metres" in contents
    assert any(c.startswith("exit_code: 0\nstdout:\n42 /workspace") for c in contents)  # in the sandbox
    assert out["messages"][-1].content == "42"  # submit returns directly and ends the run
    assert len(openai_server.requests) == 4
    assert middleware._boxes == {}  # the session was closed when the agent finished


def _rule():
    from recreate.scaffold import Rule

    return Rule(id="r-test", text="Always double-check arithmetic.")


def test_middleware_works_when_the_agent_runs_async(openai_server, bwrap, tooled_scaffold):
    openai_server.enqueue(
        tool_call("bash", {"command": "echo async"}), tool_call("submit", {"answer": "done"})
    )
    model = ChatOpenAI(model="scripted", base_url=openai_server.url, api_key="x", max_retries=0)
    agent = create_agent(model, tools=[], middleware=[ScaffoldMiddleware(tooled_scaffold, sandbox=bwrap)])
    out = asyncio.run(agent.ainvoke({"messages": [("user", "go")]}))
    assert out["messages"][-1].content == "done"
    assert "stdout:\nasync" in out["messages"][-3].content
    assert openai_server.requests[0]["messages"][0]["content"].startswith("You are an agent")


def test_concurrent_runs_through_one_middleware_keep_their_own_sessions(
    openai_server, bwrap, tooled_scaffold
):
    """Run A writes a file, run B writes the same file and finishes, then A reads its file back."""
    a_wrote, b_done = threading.Event(), threading.Event()

    def respond(body):
        run = body["messages"][1]["content"]
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not results:
            return tool_call("bash", {"command": f"echo {run} > mine.txt"})
        if run == "A" and len(results) == 1:
            a_wrote.set()
            assert b_done.wait(60)
            return tool_call("bash", {"command": "cat mine.txt"})
        return tool_call("submit", {"answer": results[-1]})

    openai_server.responder = respond
    middleware = ScaffoldMiddleware(tooled_scaffold, sandbox=bwrap)
    model = ChatOpenAI(model="scripted", base_url=openai_server.url, api_key="x", max_retries=0)
    agent = create_agent(model, tools=[], middleware=[middleware])
    with ThreadPoolExecutor(1) as pool:
        run_a = pool.submit(agent.invoke, {"messages": [("user", "A")]})
        assert a_wrote.wait(60)
        agent.invoke({"messages": [("user", "B")]})  # B finishes first: its session is closed
        b_done.set()
        answer_a = run_a.result(timeout=60)["messages"][-1].content
    assert answer_a.startswith("exit_code: 0\nstdout:\nA")  # A's own file, in A's own session
    assert middleware._boxes == {}
