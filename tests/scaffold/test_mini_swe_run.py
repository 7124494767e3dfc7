"""An exported evolved scaffold runs one task in mini-swe-agent's own agent loop (its model class pointed
at the scripted OpenAI-compatible endpoint, its local environment in a tmp workspace), uses an evolved
tool, submits; the run's trajectory, imported with recreate's mini-swe-agent importer, lands in the
experience store (embedded Chroma) with its outcome. The commands are the test's own, not a model's."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from recreate.experience.importers import read_path
from recreate.experience.store import ExperienceStore
from recreate.scaffold import MemoryItem, Rule, load_scaffold, validate_scaffold
from recreate.scaffold.mini_swe import import_config
from recreate.scaffold.mini_swe_export import export_config
from recreate.testing import ScriptedOpenAIServer
from recreate.testing.openai_server import Reply, text, tool_call
from tests.scaffold.conftest import SEEDS, echo_tool
from tests.scaffold.mini_swe_helpers import (
    PACKAGE_CONFIGS,
    get_agent,
    get_config_from_spec,
    get_environment,
    get_model,
    recursive_merge,
)

RULE = "Print intermediate results before you submit."
LESSON = "The echo_text tool repeats its text argument."
TOOL_RUN = re.compile(r"Run: `(python3 \S+/echo_text/main\.py) '<JSON arguments>'`")
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo 4"


def evolved(seed: str):
    """A seed (a shipped mini-swe-agent config, or recreate's minimal scaffold) after evolution: a rule,
    a memory item and a tool it did not have."""
    imported = seed.endswith(".yaml")
    base = import_config([PACKAGE_CONFIGS / seed])[0] if imported else load_scaffold(SEEDS / seed)
    scaffold = base.model_copy(
        update={
            "rules": [Rule(id="r1", text=RULE, origin="optimizer")],
            "memory": [MemoryItem(id="m1", title="echo tool", content=LESSON)],
            "tools": [echo_tool()],
        }
    )
    validate_scaffold(scaffold)
    return scaffold


def responder(action_format: str):
    """Runs the exported tool by the command its system message gives, then submits 4."""

    def reply(command: str) -> Reply:
        if action_format == "text":
            return text(f"THOUGHT: next.\n\n```bash\n{command}\n```")
        return tool_call("bash", {"command": command})

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        if len(messages) == 2:
            run = TOOL_RUN.search(messages[0]["content"])
            assert run, "the exported system message says how to run the tool"
            return reply(f"{run.group(1)} '{json.dumps({'text': 'hi'})}'")
        assert "echo: hi" in json.dumps(messages[-1])  # the tool ran in the environment
        return reply(SUBMIT)

    return respond


@pytest.mark.parametrize(("seed", "action_format"), [("mini.yaml", "tool_calls"), ("minimal", "text")])
def test_exported_scaffold_runs_in_mini_swe_agent_and_its_run_is_stored(
    tmp_path: Path, seed: str, action_format: str
) -> None:
    scaffold = evolved(seed).model_copy(update={"action_format": action_format})
    exported = export_config(scaffold, tmp_path / "evolved.yaml")
    assert exported.tools_dir is not None and (exported.tools_dir / "echo_text" / "main.py").is_file()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    trajectory = tmp_path / "runs" / "task-7.traj.json"
    with ScriptedOpenAIServer(responder(action_format)) as server:
        specs = [
            str(exported.path),
            f"environment.cwd={workspace}",
            "model.model_name=openai/scripted",
            f"model.model_kwargs.api_base={server.url}",
            "model.model_kwargs.api_key=sk-scripted",
            "model.cost_tracking=ignore_errors",
            f"agent.output_path={trajectory}",
        ]
        config = recursive_merge(*(get_config_from_spec(spec) for spec in specs))
        model = get_model(config=config["model"])
        environment = get_environment(config["environment"], default_type="local")
        agent = get_agent(model, environment, config["agent"], default_type="default")
        result = agent.run("What is 2 + 2?")
        prompts = "\n".join(m["content"] for m in server.requests[0]["messages"][:2])
    assert result == {"exit_status": "Submitted", "submission": "4\n"}
    for learned in (RULE, LESSON, "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"):
        assert learned in prompts
    assert len(server.requests) == 2

    batch = read_path(trajectory)
    assert not batch.errors
    with ExperienceStore(tmp_path / "experience", embedding="hash") as store:
        report = store.ingest(batch.trajectories, source=str(trajectory))
        assert len(report.added) == 1
        stored = store.get(report.added[0])
        hits = store.search("echo: hi", k=3)
    assert stored.task_id == "task-7"
    assert stored.outcome.exit_status == "submitted" and stored.outcome.submission == result["submission"]
    commands = [step.action["args"]["command"] for step in stored.steps]
    assert commands[-1] == SUBMIT and "echo_text/main.py" in commands[0]
    assert "echo: hi" in stored.steps[0].observation.stdout
    assert any(hit.trajectory_id == stored.trajectory_id for hit in hits)
