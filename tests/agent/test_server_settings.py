"""The LangGraph server's graph settings: a model the server would have to serve itself is refused, and
what a client sends (a run's context or configurable values) cannot reach another endpoint with the
server's key, drop the sandbox, or load a scaffold from outside the working directory or home."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from recreate.agent.client_settings import ALLOW_LOCAL_SANDBOX
from recreate.agent.server import graph_settings, make_graph
from recreate.testing import ScriptedOpenAIServer


@pytest.mark.parametrize(
    ("env", "context"),
    [
        ("local", None),
        ("local:/models/policy.gguf", None),
        ("openai:gpt-4.1-mini", {"model": "local"}),  # the run's context wins over the environment
    ],
)
def test_a_local_model_is_refused_in_one_line_naming_the_fix(monkeypatch, env, context) -> None:
    monkeypatch.setenv("RECREATE_MODEL", env)
    for executing in (True, False):  # also when the server only reads the graph (schemas, drawing)
        with pytest.raises(ValueError) as caught:
            graph_settings({}, context, executing=executing)
        message = str(caught.value)
        assert "\n" not in message and "'local" in message
        assert "`recreate model serve --detach`" in message and "RECREATE_MODEL to the NAME@URL" in message


@pytest.mark.parametrize(
    "model", ["SmolLM2@http://127.0.0.1:8080/v1", "openai:gpt-4.1-mini", "localhost-model"]
)
def test_a_served_model_passes(monkeypatch, model) -> None:
    monkeypatch.setenv("RECREATE_MODEL", model)
    _, resolved, _ = graph_settings({}, {"sandbox": "bwrap"})
    assert resolved == model


# --- values a client sends (the run's context or configurable values) are restricted ---------------------

SERVER_KEY = "sk-server-secret-0123456789abcdef"


@pytest.fixture(scope="module")
def endpoint():
    with ScriptedOpenAIServer() as server:  # one for the module: a server takes 0.5 s to stop
        yield server


@pytest.fixture
def server_env(monkeypatch, tmp_path, endpoint):
    """A server configured with its own endpoint (the scripted server), key, model and home."""
    monkeypatch.setenv("OPENAI_API_KEY", SERVER_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", endpoint.url)
    monkeypatch.setenv("RECREATE_MODEL", "scripted")
    monkeypatch.setenv("RECREATE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RECREATE_SANDBOX", raising=False)
    monkeypatch.delenv(ALLOW_LOCAL_SANDBOX, raising=False)
    monkeypatch.chdir(tmp_path)
    return endpoint


def _run(context: dict | None = None, configurable: dict | None = None):
    """What the LangGraph server does for a run: the langgraph.json factory builds the graph with the
    run's context, then the run invokes it."""
    runtime = SimpleNamespace(execution_runtime=SimpleNamespace(context=context))
    graph = asyncio.run(make_graph({"configurable": configurable or {}}, runtime))
    return graph.invoke({"task": "say hi"})


def test_reproduction_a_client_endpoint_never_receives_the_server_key(server_env, monkeypatch) -> None:
    monkeypatch.setenv("RECREATE_SANDBOX", "local")  # the operator's own choice: trusted
    with ScriptedOpenAIServer() as attacker:
        for where in ("context", "configurable"):
            for spec in (f"evil@{attacker.url}", f"openai:evil@{attacker.url}", f"evil@{attacker.url}/"):
                with pytest.raises(ValueError) as caught:
                    _run(**{where: {"model": spec}})
                message = str(caught.value)
                assert "\n" not in message and f"{where}.model" in message and "OPENAI_BASE_URL" in message
        assert attacker.requests == []


@pytest.mark.parametrize(
    "spec",
    [
        "evil@http://attacker.example/v1",
        "evil@HTTP://attacker.example/v1",
        "http://attacker.example/v1",
        "evil@https://attacker.example/v1",
        "m@{url}@http://attacker.example/v1",
        "m@http://127.0.0.1:1@attacker.example/v1",  # userinfo: the host is attacker.example
        "m@{url}/../../x",
        "m@{url}?x=1",
        "m@{url}\t",
        "m@{url}#x",
        "m@http://localhost:{port}/v1",  # the same machine, another name: not the configured endpoint
        "",
        "   ",
        42,
        ["m"],
    ],
)
def test_a_client_model_naming_another_endpoint_is_refused(server_env, spec) -> None:
    if isinstance(spec, str):
        spec = spec.format(url=server_env.url, port=server_env.url.split(":")[2].split("/")[0])
    with pytest.raises(ValueError) as caught:
        graph_settings({}, {"model": spec})
    assert "\n" not in str(caught.value) and "context.model" in str(caught.value)


@pytest.mark.parametrize("spec", ["scripted", "openai:scripted", "m@{url}", "m@{url}/"])
def test_a_client_model_on_the_configured_endpoint_passes(server_env, spec) -> None:
    spec = spec.format(url=server_env.url)
    assert graph_settings({}, {"model": spec})[1] == spec


def test_without_a_configured_endpoint_no_client_endpoint_passes(server_env, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL")
    with pytest.raises(ValueError, match="context.model"):
        graph_settings({}, {"model": f"m@{server_env.url}"})
    assert graph_settings({}, {"model": "openai:gpt-4.1-mini"})[1] == "openai:gpt-4.1-mini"


def test_the_servers_own_environment_stays_trusted(server_env, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("RECREATE_MODEL", "m@http://elsewhere.example/v1")
    monkeypatch.setenv("RECREATE_SANDBOX", "local")
    monkeypatch.setenv("RECREATE_SCAFFOLD", "/etc")
    assert graph_settings({}, None) == ("/etc", "m@http://elsewhere.example/v1", "local")


@pytest.mark.parametrize("where", ["context", "configurable"])
def test_a_client_cannot_ask_for_the_local_sandbox(server_env, monkeypatch, where) -> None:
    for sandbox in ("local", "LOCAL", "nsjail", "", 1):
        with pytest.raises(ValueError) as caught:
            _settings(where, sandbox=sandbox)
        assert "\n" not in str(caught.value) and f"{where}.sandbox" in str(caught.value)
    assert ALLOW_LOCAL_SANDBOX in str(_refusal(where, sandbox="local"))
    for sandbox in ("bwrap", "docker"):
        assert _settings(where, sandbox=sandbox)[2] == sandbox
    monkeypatch.setenv(ALLOW_LOCAL_SANDBOX, "1")  # the operator allows it
    assert _settings(where, sandbox="local")[2] == "local"


def _settings(where: str, **values):
    return graph_settings(
        {"configurable": values} if where == "configurable" else {}, values if where == "context" else None
    )


def _refusal(where: str, **values) -> ValueError:
    with pytest.raises(ValueError) as caught:
        _settings(where, **values)
    return caught.value


@pytest.mark.parametrize("where", ["context", "configurable"])
def test_a_client_scaffold_stays_inside_the_working_directory_or_home(server_env, tmp_path, where) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (tmp_path / "link").symlink_to(outside)  # inside by name, outside once resolved
    (tmp_path / "scaffolds" / "mine").mkdir(parents=True)
    for scaffold in ("/etc", "../x", str(outside), "link", "link/a@v1", "~/x", "/etc@v1", "../x@v2", 3):
        error = _refusal(where, scaffold=scaffold)
        assert "\n" not in str(error) and f"{where}.scaffold" in str(error)
    home = tmp_path / "home" / "runs" / "r" / "scaffolds" / "ds1000"
    for scaffold in ("scaffolds/mine", "mine@v3", "ds1000@v7", "runs/x/scaffolds/ds1000@v7", f"{home}@v2"):
        assert _settings(where, scaffold=scaffold)[0] == scaffold
