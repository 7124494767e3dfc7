"""A custom (jsonl) domain of N small coding tasks and a scripted model that solves them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recreate.sandbox import get_sandbox
from recreate.testing import Reply, tool_call

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "custom_domain"
MINIMAL = REPO / "scaffolds" / "minimal"
EVALUATOR = "python3 /evaluator/evaluate.py"


def write_tasks(path: Path, count: int) -> Path:
    """Tasks add_<i>(x) = x + i, judged by the example's evaluator (tests in the task's fields)."""
    with path.open("w") as f:
        for i in range(count):
            row = {
                "id": f"add-{i}",
                "task": f"Write a Python function `add_{i}(x)` that returns x + {i}.",
                "function": f"add_{i}",
                "tests": [[[1], 1 + i], [[-i], 0]],
                "reference": f"def add_{i}(x):\n    return x + {i}\n",
            }
            f.write(json.dumps(row) + "\n")
    return path


def solver(wrong: set[str] = frozenset(), delay_s: float = 0.0):
    """Responder: one bash step, then submit the right function (a wrong one for tasks in `wrong`)."""

    def respond(body: dict) -> Reply:
        task = body["messages"][1]["content"]
        name = task.split("`")[1].split("(")[0]
        if len(body["messages"]) == 2:
            return tool_call("bash", {"command": f"echo working on {name}"}, cost=0.001)
        offset = int(name.split("_")[1])
        answer = f"def {name}(x):\n    return x + {offset + (1 if name in wrong else 0)}\n"
        return tool_call("submit", {"answer": answer}, delay_s=delay_s, cost=0.001)

    return respond


@pytest.fixture
def bwrap():
    sandbox = get_sandbox("bwrap")
    ok, why = sandbox.available()
    if not ok:
        pytest.skip(f"bubblewrap unavailable: {why}")
    return sandbox


@pytest.fixture(autouse=True)
def _isolated_home(recreate_home):
    """Every test writes under its own RECREATE_HOME (and runs from tmp_path), never into the repo."""
    return recreate_home
