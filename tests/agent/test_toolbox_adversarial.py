"""The ToolBox checks a model's arguments against a model-written schema on the host: a broken or
absurdly nested schema is one clear error when the box is built, and a regex that backtracks for hours
(`^(a|a)*$`) stops at a deadline instead of holding the host's GIL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from recreate.agent.toolbox import ActionError, ToolBox, tool_specs
from recreate.scaffold import Scaffold, ScaffoldError, SmokeTest, Tool, load_scaffold
from tests.deadline import python_within

REPO = Path(__file__).resolve().parents[2]
MINIMAL = REPO / "scaffolds" / "minimal"


def with_tool(args: dict[str, Any]) -> Scaffold:
    """The minimal seed plus one tool with `args`, unvalidated, as a hand-edited folder loads."""
    tool = Tool(
        name="probe",
        description="A tool under test.",
        args=args,
        smoke=SmokeTest(),
        language="python",
        code="print(1)\n",
    )
    base = load_scaffold(MINIMAL)
    return base.model_copy(update={"tools": [tool]})


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"type": "object", "properties": {"x": {"type": "strnig"}}}, "invalid JSON schema"),
        (nested(400), "nested 801 levels deep"),
    ],
)
def test_a_broken_schema_is_named_when_the_box_is_built(args, message):
    with pytest.raises(ScaffoldError) as info:
        ToolBox(with_tool(args), session=None)  # type: ignore[arg-type]
    assert str(info.value).startswith("tools/probe/tool.yaml: args: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "args",
    [
        {"type": "object", "properties": {"word": {"type": "string", "pattern": "^[a-z]+$"}}},
        {"type": "object", "patternProperties": {"^w": {"type": "string", "pattern": "^[a-z]+$"}}},
    ],
)
def test_patterns_are_still_checked(args):
    box = ToolBox(with_tool(args), session=None)  # type: ignore[arg-type]
    box.check("probe", {"word": "abc"})
    with pytest.raises(ActionError, match=r"bad arguments for 'probe': 'ABC' does not match"):
        box.check("probe", {"word": "ABC"})


CATASTROPHIC_CALL = """
import recreate.scaffold.bounded as bounded
from recreate.agent.toolbox import ActionError, ToolBox, tool_specs
from tests.agent.test_toolbox_adversarial import with_tool

bounded.RENDER_TIMEOUT_S = 2.0
evil = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a|a)*$"}}}
box = ToolBox(with_tool(evil), None)
try:
    box.check("probe", {"s": "a" * 40 + "!"})
except ActionError as exc:
    print("REFUSED", exc)
"""


def test_a_catastrophic_regex_stops_at_a_deadline():
    """Before the fix `^(a|a)*$` was matched in the agent's process: 40 characters held its GIL for
    hours (so this runs in a child with a deadline)."""
    done = python_within(
        CATASTROPHIC_CALL, hung="checking arguments against a backtracking regex hung the process"
    )
    assert done.stdout.startswith("REFUSED arguments of 'probe': checking the arguments")
    assert "took longer than 2 s" in done.stdout


def test_a_self_referencing_schema_is_an_action_error_not_a_recursion_error():
    """`allOf: [{$ref: "#"}]` is a valid schema that no instance can be checked against: jsonschema
    recursed until Python's limit, in the agent's process."""
    box = ToolBox(with_tool({"type": "object", "allOf": [{"$ref": "#"}]}), session=None)  # type: ignore[arg-type]
    with pytest.raises(ActionError, match=r"arguments of 'probe': the arguments cannot be checked"):
        box.check("probe", {"x": 1})


def ref_bomb(levels: int) -> dict[str, Any]:
    defs: dict[str, Any] = {"d0": {"type": "string"}}
    for n in range(1, levels):
        ref = {"$ref": f"#/$defs/d{n - 1}"}
        defs[f"d{n}"] = {"type": "object", "properties": {"a": ref, "b": ref}}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": f"#/$defs/d{levels - 1}"}}}


def test_tool_specs_refuse_a_schema_that_expands_when_shown_to_a_model():
    """create_domain_agent shows tool_specs to the model through LangChain, which inlines every $ref:
    this few-hundred-byte schema would become 2**40 values in the agent's process."""
    with pytest.raises(ScaffoldError, match=r"^tools/probe/tool.yaml: args: its \$refs expand to"):
        tool_specs(with_tool(ref_bomb(40)))
    assert [spec["name"] for spec in tool_specs(with_tool(ref_bomb(3)))][1] == "probe"
