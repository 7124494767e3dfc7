"""The seed scaffolds: valid, stored canonically, and render real benchmark tasks."""

from __future__ import annotations

import json

import pytest

from recreate.scaffold import (
    canonical_files,
    load_scaffold,
    render_instance,
    render_system,
    validate_scaffold,
)
from tests.scaffold.conftest import SEEDS

SEED_NAMES = ["minimal", "math", "ds1000"]


@pytest.mark.parametrize("name", SEED_NAMES)
def test_seed_is_valid_and_canonical(name):
    scaffold = load_scaffold(SEEDS / name)
    validate_scaffold(scaffold)
    assert scaffold.name == name
    on_disk = {
        str(p.relative_to(SEEDS / name)): p.read_bytes() for p in (SEEDS / name).rglob("*") if p.is_file()
    }
    assert canonical_files(scaffold) == on_disk  # so a stored or exported seed is byte-identical


@pytest.mark.parametrize("name", SEED_NAMES)
@pytest.mark.parametrize("action_format", ["tool_calls", "text"])
def test_seed_system_message_explains_acting_and_submitting(name, action_format):
    scaffold = load_scaffold(SEEDS / name).model_copy(update={"action_format": action_format})
    text = render_system(scaffold)
    assert "submit" in text
    assert ("`bash`" in text) == (action_format == "tool_calls")
    assert ("fenced command" in text) == (action_format == "text")
    assert "{{" not in text and "{%" not in text


def test_minimal_seed_is_a_few_lines():
    assert len(render_system(load_scaffold(SEEDS / "minimal")).splitlines()) <= 5


def test_math_seed_renders_real_problems(shared_data):
    scaffold = load_scaffold(SEEDS / "math")
    for line in (shared_data / "math/aime24.jsonl").read_text().splitlines()[:5]:
        problem = json.loads(line)["problem"]
        text = render_instance(scaffold, task=problem, task_id="aime24")
        assert problem in text and text.endswith("Submit only the final answer.")


def test_ds1000_seed_renders_real_problems(shared_data):
    scaffold = load_scaffold(SEEDS / "ds1000")
    for line in (shared_data / "ds1000/ds1000_dev.jsonl").read_text().splitlines()[:5]:
        prompt = json.loads(line)["prompt"]
        text = render_instance(scaffold, task=prompt, files=["problem.json"])
        assert prompt.strip() in text
        assert "Files in the workspace: problem.json" in text
        assert text.endswith("Submit only the code that goes after BEGIN SOLUTION.")
