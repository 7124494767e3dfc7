"""Fixtures for the domain-agent tests: a real bubblewrap sandbox and scaffolds to run."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from recreate.sandbox import get_sandbox
from recreate.sandbox.base import Sandbox
from recreate.scaffold import MemoryItem, Scaffold, SmokeTest, Tool, load_scaffold

REPO = Path(__file__).resolve().parents[2]
MINIMAL = REPO / "scaffolds" / "minimal"


@pytest.fixture
def bwrap() -> Sandbox:
    sandbox = get_sandbox("bwrap")
    ok, why = sandbox.available()
    if not ok:
        pytest.skip(f"bubblewrap unavailable: {why}")
    return sandbox


@pytest.fixture
def tooled_scaffold() -> Scaffold:
    """The minimal seed plus one python tool and two memory items."""
    base = load_scaffold(MINIMAL)
    adder = Tool(
        name="add_numbers",
        description="Add two integers and print the sum.",
        args={
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
        smoke=SmokeTest(args={"a": 1, "b": 2}, expect="3"),
        language="python",
        code="import json, os, sys\nargs = json.loads(sys.argv[1])\nprint(args['a'] + args['b'], os.getcwd())\n",  # noqa: E501
    )
    memory = [
        MemoryItem(
            id="m1", title="Pandas groupby keeps NaN keys out", content="Use dropna=False to keep them."
        ),
        MemoryItem(
            id="m2", title="Submitting integers", content="Submit the bare integer, no units.", tags=["math"]
        ),
    ]
    return base.model_copy(update={"name": "tooled", "tools": [adder], "memory": memory})


class ScriptedChat(GenericFakeChatModel):
    """In-process scripted model; an item that is an exception is raised instead of replied."""

    def bind_tools(self, tools, **kwargs):  # the script already holds the tool calls
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        item = next(self.messages)
        if isinstance(item, BaseException):
            raise item
        return ChatResult(generations=[ChatGeneration(message=item)])


def call(name: str, **args) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call-{name}-{len(str(args))}"}])


@pytest.fixture(autouse=True)
def _isolated_home(recreate_home):
    """Every test writes under its own RECREATE_HOME (and runs from tmp_path), never into the repo."""
    return recreate_home
