"""`langgraph dev` (the `studio` extra) serves the repo's graphs with schemas LangGraph Studio can show."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from recreate.testing import tool_call
from tests.agent.conftest import REPO

GRAPHS = ("domain_agent", "router_app")
SETTINGS = {"scaffold", "model", "sandbox"}


def _call(port: int, path: str, body: dict | None = None, timeout: float = 30) -> dict | list:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def langgraph_dev(tmp_path, openai_server):
    """`langgraph dev` over the repo's langgraph.json (absolute paths, so its files land in tmp_path),
    with an endpoint (the scripted server) but no model configured: reading the graphs must not need one."""
    cli = Path(sys.executable).with_name("langgraph")
    if not cli.exists():
        pytest.skip("langgraph-cli[inmem] is not installed (pip install -e '.[studio]')")
    config = json.loads((REPO / "langgraph.json").read_text())
    config["dependencies"] = [str(REPO)]
    config["graphs"] = {n: str(REPO / t.lstrip("./")) for n, t in config["graphs"].items() if n in GRAPHS}
    (tmp_path / "langgraph.json").write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECREATE_MODEL", "OPENAI_"))}
    env |= {
        "RECREATE_HOME": str(tmp_path / "home"),
        "RECREATE_SANDBOX": "local",
        "OPENAI_BASE_URL": openai_server.url,
    }
    port = _free_port()
    argv = [str(cli), "dev", "--port", str(port), "--no-browser", "--no-reload"]
    log = tmp_path / "server.log"
    with log.open("w") as sink:
        server = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 90
        while True:
            try:
                _call(port, "/ok", timeout=1)
                break
            except (OSError, urllib.error.URLError):
                if server.poll() is not None or time.time() > deadline:
                    pytest.fail(f"langgraph dev did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.3)
        yield port, tmp_path / "home"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.mark.slow
def test_langgraph_dev_serves_the_schemas_and_runs_with_the_context_settings(langgraph_dev, openai_server):
    port, home = langgraph_dev
    schemas = {}
    for graph in GRAPHS:
        [assistant] = _call(port, "/assistants/search", {"graph_id": graph, "limit": 10})
        schemas[graph] = _call(port, f"/assistants/{assistant['assistant_id']}/schemas")
    agent = schemas["domain_agent"]
    assert set(agent["input_schema"]["properties"]) == {"messages", "task"}
    assert set(agent["output_schema"]["properties"]) == {
        "messages",
        "submission",
        "exit_status",
        "trajectory_id",
    }
    assert set(agent["context_schema"]["properties"]) == SETTINGS
    app = schemas["router_app"]
    assert set(app["input_schema"]["properties"]) == set(app["output_schema"]["properties"]) == {"messages"}
    assert set(app["context_schema"]["properties"]) == SETTINGS

    # a run takes its model from the context Studio shows (none is configured on the server), served by
    # the server's endpoint; the sandbox is the server's own (a client may not ask for `local`)
    openai_server.enqueue(tool_call("submit", {"answer": "6"}))
    context = {"model": "scripted"}
    out = _call(
        port,
        "/runs/wait",
        {"assistant_id": "domain_agent", "input": {"task": "What is 2*3?"}, "context": context},
        timeout=60,
    )
    assert out["submission"] == "6" and [m["type"] for m in out["messages"]] == ["ai"]
    assert (home / "trajectories" / f"{out['trajectory_id']}.json").is_file()
