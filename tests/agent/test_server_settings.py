"""The LangGraph server's graph settings: a model the server would have to serve itself is refused."""

from __future__ import annotations

import pytest

from recreate.agent.server import graph_settings


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
    _, resolved, _ = graph_settings({}, {"sandbox": "local"})
    assert resolved == model
