"""Static validation: every kind of problem is found, named by file and field, and reported together."""

from __future__ import annotations

import pytest

from recreate.scaffold import (
    Bounds,
    Limits,
    MemoryItem,
    Rule,
    ScaffoldValidationError,
    SmokeTest,
    validate_scaffold,
)
from tests.scaffold.conftest import echo_tool, make_scaffold


def problems(scaffold, **kwargs) -> list[str]:
    with pytest.raises(ScaffoldValidationError) as info:
        validate_scaffold(scaffold, **kwargs)
    return [str(p) for p in info.value.problems]


def test_a_good_scaffold_validates(scaffold):
    assert validate_scaffold(scaffold) is None


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"system_prompt": "Hi {{ name"}, "scaffold.yaml: system_prompt: template syntax error at line 1"),
        (
            {"instance_template": "{% for x in task %}"},
            "scaffold.yaml: instance_template: template syntax error",
        ),
        ({"instance_template": "Solve it."}, "scaffold.yaml: instance_template: must use {{ task }}"),
        (
            {"instance_template": "{{ task }} {{ answer }}"},
            "scaffold.yaml: instance_template: unknown template variable(s) answer",
        ),
        ({"system_prompt": "{{ task }}"}, "scaffold.yaml: system_prompt: unknown template variable(s) task"),
        (
            {"instance_template": "{{ task.upper(1, 2, 3) }}"},
            "scaffold.yaml: instance_template: does not render",
        ),
        (
            {"instance_template": "{{ task.__class__ }}"},
            "scaffold.yaml: instance_template: line 1: .__class__ reaches a Python internal",
        ),
        (
            {"limits": Limits(max_steps=1000)},
            "scaffold.yaml: limits.max_steps: 1000 exceeds the configured bound 250",
        ),
        (
            {"limits": Limits(max_cost_usd=99)},
            "scaffold.yaml: limits.max_cost_usd: 99.0 exceeds the configured bound",
        ),
        (
            {"limits": Limits(command_timeout_s=10_000)},
            "scaffold.yaml: limits.command_timeout_s: 10000.0 exceeds",
        ),
        (
            {"rules": [Rule(id="r1", text="a"), Rule(id="r1", text="b")]},
            "scaffold.yaml: rules: duplicate rule id 'r1'",
        ),
        ({"tools": [echo_tool(), echo_tool()]}, "scaffold.yaml: tools: duplicate tool name 'echo_text'"),
        ({"tools": [echo_tool(name="submit")]}, "scaffold.yaml: tools[0]: 'submit' is reserved"),
        (
            {
                "memory": [
                    MemoryItem(id="m1", title="a", content="b"),
                    MemoryItem(id="m1", title="c", content="d"),
                ]
            },
            "memory.jsonl: id: duplicate memory id 'm1'",
        ),
        (
            {"tools": [echo_tool(code="def f(:\n    pass\n")]},
            "tools/echo_text/main.py: Python syntax error at line 1",
        ),
        (
            {"tools": [echo_tool(args={"type": "array"})]},
            "tools/echo_text/tool.yaml: args.type: the args schema must",
        ),
        (
            {"tools": [echo_tool(args={"type": "object", "properties": {"text": {"type": "strung"}}})]},
            "tools/echo_text/tool.yaml: args: invalid JSON schema",
        ),
        (
            {"tools": [echo_tool(smoke=SmokeTest(args={"text": 3}, expect="3"))]},
            "tools/echo_text/tool.yaml: smoke.args.text: does not match the args schema",
        ),
        (
            {"tools": [echo_tool(smoke=SmokeTest(args={}, expect="x"))]},
            "tools/echo_text/tool.yaml: smoke.args: does not match the args schema: 'text' is a required",
        ),
    ],
)
def test_each_kind_of_problem_is_named(overrides, expected):
    found = problems(make_scaffold(**overrides))
    assert any(p.startswith(expected) for p in found), found


def test_all_problems_are_reported_at_once():
    scaffold = make_scaffold(
        instance_template="no task here",
        limits=Limits(max_steps=999),
        rules=[Rule(id="r1", text="a"), Rule(id="r1", text="b")],
        tools=[echo_tool(code="if:\n"), echo_tool(name="bash")],
    )
    found = problems(scaffold)
    assert len(found) == 5
    assert {p.split(":")[0] for p in found} == {"scaffold.yaml", "tools/echo_text/main.py"}


def test_bounds_are_configurable_and_sizes_bounded():
    bounds = Bounds(
        max_steps=10, max_rules=1, max_tools=0, max_memory=0, max_prompt_chars=50, max_tool_code_chars=10
    )
    found = problems(make_scaffold(), bounds=bounds)
    assert "scaffold.yaml: limits.max_steps: 20 exceeds the configured bound 10" in found
    assert "scaffold.yaml: rules: 2 rules exceed the configured bound 1" in found
    assert "scaffold.yaml: tools: 1 tools exceed the configured bound 0" in found
    assert "memory.jsonl: 1 memory items exceed the configured bound 0" in found
    assert any(p.startswith("scaffold.yaml: system_prompt: ") and "prompt characters" in p for p in found)
    assert any(
        p.startswith("tools/echo_text/main.py: ") and "characters exceed the bound 10" in p for p in found
    )
    validate_scaffold(make_scaffold(), bounds=Bounds(max_steps=20))


def test_error_message_lists_every_problem():
    with pytest.raises(ScaffoldValidationError) as info:
        validate_scaffold(make_scaffold(instance_template="x", limits=Limits(max_steps=999)))
    message = str(info.value)
    assert message.startswith("demo: invalid scaffold (2 problems):")
    assert "  - scaffold.yaml: instance_template: must use {{ task }}" in message
