"""Shared builders for scaffold tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from recreate.scaffold import Limits, MemoryItem, Rule, Scaffold, ScaffoldStore, SmokeTest, Tool

REPO = Path(__file__).resolve().parents[2]
SEEDS = REPO / "scaffolds"

ECHO_CODE = """import json
import sys

args = json.loads(sys.argv[1])
print("echo:", args["text"])
"""


def echo_tool(name: str = "echo_text", code: str = ECHO_CODE, **overrides) -> Tool:
    fields = {
        "name": name,
        "description": "Print the given text.",
        "args": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        "smoke": SmokeTest(args={"text": "hello"}, expect="echo: hello"),
        "language": "python",
        "code": code,
    }
    return Tool(**{**fields, **overrides})


def make_scaffold(**overrides) -> Scaffold:
    fields = {
        "name": "demo",
        "domain": "general",
        "description": "A scaffold for tests.",
        "system_prompt": "You are a careful agent for {{ domain }}.\nUse the tools: "
        "{% for t in tools %}{{ t.name }} {% endfor %}\nSubmit with submit.\n",
        "instance_template": "Task {{ task_id }}:\n{{ task }}\n",
        "limits": Limits(max_steps=20, max_cost_usd=0.5, command_timeout_s=30),
        "tools": [echo_tool()],
        "rules": [
            Rule(id="r1", text="Read the task twice."),
            Rule(id="r2", text="Check the output before submitting.", scope="output"),
        ],
        "memory": [
            MemoryItem(id="m1", title="Pandas copy", content="Use df.copy() before editing.", tags=["pandas"])
        ],
    }
    return Scaffold(**{**fields, **overrides})


@pytest.fixture
def scaffold() -> Scaffold:
    return make_scaffold()


@pytest.fixture
def store(tmp_path: Path) -> ScaffoldStore:
    return ScaffoldStore(tmp_path / "store")


def tree_snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root (relative path -> bytes): equal snapshots mean nothing changed."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
