"""The agent's public schemas: what a parent graph and LangGraph Studio read."""

from __future__ import annotations

from recreate import create_domain_agent
from recreate.testing import ScriptedOpenAIServer
from tests.agent.conftest import MINIMAL


def test_input_output_and_context_schemas_show_only_the_public_keys(tmp_path):
    with ScriptedOpenAIServer() as server:  # never called: building the graph contacts no model
        graph = create_domain_agent(MINIMAL, model=f"scripted@{server.url}", sandbox="local")
    inputs = graph.get_input_jsonschema()
    assert set(inputs["properties"]) == {"messages", "task"} and not inputs.get("required")
    assert inputs["properties"]["task"]["type"] == "string"
    outputs = graph.get_output_jsonschema()
    assert set(outputs["properties"]) == {"messages", "submission", "exit_status", "trajectory_id"}
    context = graph.get_context_jsonschema()
    assert set(context["properties"]) == {"scaffold", "model", "sandbox"}
    assert all(field.get("description") for field in context["properties"].values())
