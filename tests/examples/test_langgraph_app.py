"""examples/langgraph_app: router + domain agent node, against the local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph_sdk.runtime import _ReadRuntime

from recreate.sandbox import get_sandbox
from recreate.testing import text, tool_call
from tests.optimizer.script import EVALUATOR, GATE_ALPHA, WORDS, responder

REPO = Path(__file__).resolve().parents[2]


def _load(path: Path, name: str):
    """Import a file the way `langgraph dev` does (registered, so its type hints resolve)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.bwrap
def test_router_sends_work_to_the_agent_and_questions_to_chat(openai_server, tmp_path, monkeypatch):
    if not get_sandbox("bwrap").available()[0]:
        pytest.skip("bubblewrap unavailable")
    monkeypatch.setenv("RECREATE_HOME", str(tmp_path / "home"))
    app_module = _load(REPO / "examples" / "langgraph_app" / "app.py", "langgraph_app")
    openai_server.enqueue(
        text("agent"),  # router
        tool_call("bash", {"command": "python3 -c 'print(sum(range(101)))'"}),
        tool_call("submit", {"answer": "5050"}),
        text("chat"),  # router, second turn
        text("You are welcome."),
    )
    with sqlite3.connect(tmp_path / "app.sqlite", check_same_thread=False) as conn:
        app = app_module.build_app(
            REPO / "scaffolds" / "minimal", f"scripted@{openai_server.url}", checkpointer=SqliteSaver(conn)
        )
        config = {"configurable": {"thread_id": "t1"}}
        first = app.invoke({"messages": [("user", "Sum the integers 1..100 with python")]}, config)
        assert [(m.type, m.content) for m in first["messages"]] == [
            ("human", "Sum the integers 1..100 with python"),
            ("ai", "5050"),
        ]
        assert app.get_state(config).values["route"] == "agent"
        second = app.invoke({"messages": [("user", "Thanks!")]}, config)
        assert [m.type for m in second["messages"]] == ["human", "ai", "human", "ai"]
        assert second["messages"][-1].content == "You are welcome."
        assert app.get_state(config).values["route"] == "chat"
    agent_request = openai_server.requests[1]
    assert [t["function"]["name"] for t in agent_request["tools"]] == ["bash", "submit"]
    assert "tools" not in openai_server.requests[0]  # the router call binds no tools
    # the app's own chat model gets the plain conversation: no agent prompt, no tool turns
    assert [m["role"] for m in openai_server.requests[4]["messages"]] == ["user", "assistant", "user"]


def test_langgraph_json_points_at_loadable_factories(monkeypatch, openai_server):
    config = json.loads((REPO / "langgraph.json").read_text())
    monkeypatch.setenv("RECREATE_MODEL", f"scripted@{openai_server.url}")
    monkeypatch.setenv("RECREATE_SANDBOX", "local")  # the operator's choice: a client may not pick `local`
    for name, target in config["graphs"].items():
        file, _, attr = target.partition(":")
        factory = getattr(_load(REPO / file, f"lg_{attr}"), attr)
        config = {"configurable": {}}
        if "runtime" in inspect.signature(factory).parameters:  # the server's runtime while it reads
            reading = _ReadRuntime(access_context="assistants.read", user=None, store=None)
            graph = asyncio.run(factory(config, runtime=reading))  # the server awaits them
        else:
            graph = asyncio.run(factory(config))
        assert graph.checkpointer is None  # the server supplies its own
        inputs = graph.get_input_jsonschema()["properties"]
        assert ("history" if name == "evolve" else "messages") in inputs


@pytest.mark.slow
@pytest.mark.bwrap
def test_langgraph_dev_serves_the_domain_agent_and_the_evolve_loop(openai_server, tmp_path):
    cli = Path(sys.executable).with_name("langgraph")
    if not cli.exists():
        pytest.skip("langgraph-cli[inmem] is not installed")
    if not get_sandbox("bwrap").available()[0]:
        pytest.skip("bubblewrap unavailable")
    from langgraph_sdk import get_sync_client

    openai_server.enqueue(
        tool_call("bash", {"command": "echo $((2*3))"}), tool_call("submit", {"answer": "6"})
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(
        os.environ,
        RECREATE_MODEL=f"scripted@{openai_server.url}",
        RECREATE_HOME=str(tmp_path / "home"),
        RECREATE_EMBEDDING="hash",
        # what runs code or reads files outside the server's folders is the operator's, not a client's
        RECREATE_EVALUATOR=EVALUATOR,
        RECREATE_DATA=str(WORDS / "tasks.jsonl"),
        RECREATE_GATE_ALPHA=str(GATE_ALPHA),
    )
    # the repo's langgraph.json with absolute paths, so the server's files land in tmp_path, not the repo
    config = json.loads((REPO / "langgraph.json").read_text())
    config["dependencies"] = [str(REPO)]
    config["graphs"] = {name: str(REPO / target.lstrip("./")) for name, target in config["graphs"].items()}
    (tmp_path / "langgraph.json").write_text(json.dumps(config))
    argv = [str(cli), "dev", "--port", str(port), "--no-browser", "--no-reload"]
    log = tmp_path / "server.log"  # where to look when a run fails (e.g. a BlockingError on its loop)
    with log.open("w") as sink:
        server = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/ok", timeout=1)
                break
            except OSError:
                assert server.poll() is None and time.time() < deadline, "langgraph dev did not start"
                time.sleep(0.3)
        client = get_sync_client(url=f"http://127.0.0.1:{port}")
        out = client.runs.wait(None, "domain_agent", input={"task": "What is 2*3?"})
        openai_server.responder = responder
        words = {"domain": "jsonl", "rounds": 1}
        evolved = client.runs.wait(None, "evolve", input={}, config={"configurable": words})
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert out["exit_status"] == "submitted" and out["submission"] == "6"
    assert (tmp_path / "home" / "trajectories" / f"{out['trajectory_id']}.json").is_file()
    assert evolved["final"].startswith("minimal@v") and [h["accepted"] for h in evolved["history"]] == [
        True,
        True,
    ]
