"""The evolve graph's LangGraph factory: a run's configurable values come from a client and are held to
what the server allows (its endpoint, paths inside its working directory or home, no evaluator)."""

from __future__ import annotations

import pytest

from recreate.optimizer.server import evolve_graph
from recreate.testing import ScriptedOpenAIServer


@pytest.fixture
def server(monkeypatch, recreate_home, openai_server):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-server-secret-0123456789abcdef")
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.url)
    monkeypatch.setenv("RECREATE_MODEL", "scripted")
    return openai_server


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("model", "evil@http://attacker.example/v1"),
        ("optimizer_model", "evil@http://attacker.example/v1"),
        ("evaluator", "os:system"),  # imported and called in the server's process
        ("evaluator", "python3 -c 'import os'"),
        ("seed", "/etc"),
        ("data", "/etc/passwd"),
        ("data", "../tasks.jsonl"),
        ("domain", "recreate.evil:Domain"),
        ("rounds", "1; rm"),
        ("batch_size", 0),
    ],
)
def test_a_client_value_outside_what_the_server_allows_is_refused(server, key, value) -> None:
    with pytest.raises(ValueError) as caught:
        evolve_graph({"configurable": {key: value}})
    message = str(caught.value)
    assert "\n" not in message and f"configurable.{key}" in message
    assert server.requests == []


def test_the_attacker_endpoint_gets_nothing(server) -> None:
    with ScriptedOpenAIServer() as attacker:
        for key in ("model", "optimizer_model"):
            with pytest.raises(ValueError):
                evolve_graph({"configurable": {key: f"evil@{attacker.url}"}})
        assert attacker.requests == []


@pytest.mark.parametrize(("variable", "value"), [("RECREATE_ROUNDS", "-1"), ("RECREATE_BATCH_SIZE", "three")])
def test_a_count_from_the_environment_is_refused_naming_the_variable(
    server, monkeypatch, variable, value
) -> None:
    """It was int()-ed bare: "invalid literal for int() with base 10: 'three'"."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError) as caught:
        evolve_graph({"configurable": {}})
    assert str(caught.value) == f"{variable}={value!r} is not a count; set it to a whole number above 0"
    assert server.requests == []


@pytest.mark.parametrize("value", ["0.5", "0", "0.0001", "nan", "loose"])
def test_the_gate_level_is_the_operators_and_a_bad_one_is_refused_naming_it(
    server, monkeypatch, caplog, value
) -> None:
    monkeypatch.setenv("RECREATE_GATE_ALPHA", value)
    with pytest.raises(ValueError) as caught:
        evolve_graph({"configurable": {}})
    assert (
        str(caught.value) == f"RECREATE_GATE_ALPHA={value!r} is not a level; set it from 0.001 to below 0.5"
    )
    monkeypatch.delenv("RECREATE_GATE_ALPHA")
    with caplog.at_level("WARNING", logger="recreate.progress"):
        evolve_graph({"configurable": {"gate_alpha": 0.5}})  # a client's level is not read
    assert "with 5 validation task(s) the gate (a paired test at level 0.025)" in caplog.text
    caplog.clear()
    monkeypatch.setenv("RECREATE_GATE_ALPHA", "0.125")
    with caplog.at_level("WARNING", logger="recreate.progress"):
        evolve_graph({"configurable": {}})
    assert "validation task(s)" not in caplog.text and server.requests == []  # 5 tasks can show 2^-3
