"""Edit ops: each applies, each failure is clear, and the input scaffold never changes."""

from __future__ import annotations

import json

import pytest

from recreate.scaffold import (
    AddMemory,
    AddRule,
    OpError,
    RemoveMemory,
    RemoveRule,
    RemoveTool,
    ReplaceText,
    ScaffoldValidationError,
    SetField,
    SmokeTest,
    UpdateRule,
    UpdateTool,
    Vote,
    apply,
    ops_json_schema,
    ops_to_json,
    parse_ops,
)
from recreate.scaffold.ops import OP_NAMES
from tests.scaffold.conftest import ECHO_CODE

SHOUT_TOOL = {
    "op": "add_tool",
    "name": "shout",
    "description": "Upper-case the text.",
    "args": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    "smoke": {"args": {"text": "hi"}, "expect": "HI"},
    "language": "bash",
    "code": 'python3 -c \'import json,sys; print(json.loads(sys.argv[1])["text"].upper())\' "$1"\n',
    "rationale": "several runs upper-cased by hand",
    "evidence": ["traj-1", "traj-2"],
}


def test_set_field(scaffold):
    new = apply(
        scaffold,
        [SetField(field="limits.max_steps", value=40), SetField(field="action_format", value="text")],
    )
    assert (new.limits.max_steps, new.action_format) == (40, "text")
    assert (scaffold.limits.max_steps, scaffold.action_format) == (20, "tool_calls")


@pytest.mark.parametrize(
    ("field", "value"),
    [("limits.max_steps", True), ("limits.max_steps", "7"), ("limits.max_steps", 7.5),
     ("limits.max_cost_usd", True), ("limits.command_timeout_s", "30")],
)  # fmt: skip
def test_a_limit_is_a_number_not_a_truth_value_or_text(scaffold, field, value):
    with pytest.raises((OpError, ScaffoldValidationError)):  # `true` was 1 step
        apply(scaffold, [{"op": "set_field", "field": field, "value": value}])
    assert (
        apply(scaffold, [{"op": "set_field", "field": "limits.max_cost_usd", "value": 2}]).limits.max_cost_usd
        == 2
    )


def test_set_field_writes_worked_examples_and_rejects_malformed_ones(scaffold):
    example = {"task": "What is 1 + 1?", "steps": [{"command": "echo 2", "output": "2"}, {"submit": "2"}]}
    new = apply(scaffold, [SetField(field="examples", value=[example])])
    assert new.examples[0].steps[0].command == "echo 2" and not scaffold.examples
    with pytest.raises((OpError, ScaffoldValidationError), match="only the last step"):
        apply(
            scaffold,
            [SetField(field="examples", value=[{"task": "t", "steps": [{"submit": "1"}, {"submit": "2"}]}])],
        )


def test_set_field_cannot_touch_identity_fields(scaffold):
    with pytest.raises(OpError, match=r"op 0 \(set_field\): field: Input should be 'description'"):
        apply(scaffold, [{"op": "set_field", "field": "name", "value": "other"}])


@pytest.mark.parametrize(
    ("field", "old", "new", "check"),
    [
        ("system_prompt", "careful", "thorough", lambda s: "thorough agent" in s.system_prompt),
        ("instance_template", "Task", "Problem", lambda s: s.instance_template.startswith("Problem {{")),
        ("description", "tests", "checks", lambda s: s.description == "A scaffold for checks."),
        ("rules.r1.text", "twice", "three times", lambda s: s.rules[0].text == "Read the task three times."),
        ("tools.echo_text.code", '"echo:"', '"said:"', lambda s: '"said:"' in s.tools[0].code),
        (
            "tools.echo_text.description",
            "given",
            "same",
            lambda s: s.tools[0].description == "Print the same text.",
        ),
        (
            "memory.m1.content",
            "df.copy()",
            "df.copy(deep=True)",
            lambda s: "deep=True" in s.memory[0].content,
        ),
    ],
)
def test_replace_text_targets(scaffold, field, old, new, check):
    result = apply(scaffold, [ReplaceText(field=field, old=old, new=new)])
    assert check(result)
    assert not check(scaffold)


def test_replace_text_needs_exactly_one_match(scaffold):
    with pytest.raises(OpError, match=r"op 0 \(replace_text\): 'nowhere' does not occur in system_prompt"):
        apply(scaffold, [ReplaceText(field="system_prompt", old="nowhere", new="x")])
    with pytest.raises(OpError, match="'{{ ' occurs 2 times in system_prompt; quote more context"):
        apply(scaffold, [ReplaceText(field="system_prompt", old="{{ ", new="{{")])
    with pytest.raises(OpError, match="cannot replace text in field 'limits'"):
        apply(scaffold, [ReplaceText(field="limits", old="2", new="3")])
    with pytest.raises(OpError, match=r"unknown rule 'r9' \(known: 'r1', 'r2'\)"):
        apply(scaffold, [ReplaceText(field="rules.r9.text", old="a", new="b")])


def test_rule_ops(scaffold):
    new = apply(
        scaffold,
        [
            AddRule(text="Print intermediate results.", scope="debugging"),
            AddRule(id="csv", text="Read CSVs with pandas."),
            UpdateRule(id="r1", text="Read the task carefully."),
            RemoveRule(id="r2"),
        ],
    )
    assert [(r.id, r.text, r.scope, r.origin) for r in new.rules] == [
        ("r1", "Read the task carefully.", "general", "seed"),
        ("r3", "Print intermediate results.", "debugging", "optimizer"),
        ("csv", "Read CSVs with pandas.", "general", "optimizer"),
    ]


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (AddRule(id="r1", text="dup"), "rule 'r1' already exists; use update_rule"),
        (UpdateRule(id="r7", text="x"), "unknown rule 'r7'"),
        (UpdateRule(id="r1"), "nothing to update"),
        (RemoveRule(id="r7"), "unknown rule 'r7'"),
        (RemoveTool(name="grep"), "unknown tool 'grep' \\(known: 'echo_text'\\)"),
        (UpdateTool(name="echo_text"), "nothing to update"),
        (RemoveMemory(id="m9"), "unknown memory item 'm9'"),
        (AddMemory(id="m1", title="t", content="c"), "memory item 'm1' already exists"),
        (Vote(target="rule", id="r1"), "an empty vote"),
        (Vote(target="memory", id="r1", helpful=1), "unknown memory item 'r1'"),
    ],
)
def test_ops_that_do_not_apply(scaffold, op, message):
    before = scaffold.model_dump()
    with pytest.raises(OpError, match=message):
        apply(scaffold, [AddRule(text="fine"), op])
    assert scaffold.model_dump() == before


def test_tool_ops(scaffold):
    new = apply(
        scaffold, [SHOUT_TOOL, UpdateTool(name="echo_text", description="Echo.", code=ECHO_CODE + "\n")]
    )
    assert [t.name for t in new.tools] == ["echo_text", "shout"]
    assert new.tool("shout").language == "bash"
    assert new.tool("echo_text").description == "Echo."
    assert [t.name for t in apply(new, [RemoveTool(name="echo_text")]).tools] == ["shout"]
    with pytest.raises(OpError, match="tool 'shout' already exists; use update_tool"):
        apply(new, [SHOUT_TOOL])


def test_tool_code_is_checked_when_added(scaffold):
    with pytest.raises(ScaffoldValidationError) as info:
        apply(scaffold, [{**SHOUT_TOOL, "language": "python", "code": "print('x'\n"}])
    assert [p.file for p in info.value.problems] == ["tools/shout/main.py"]
    with pytest.raises(ScaffoldValidationError, match="smoke.args"):
        apply(scaffold, [UpdateTool(name="echo_text", smoke=SmokeTest(args={"txt": "a"}, expect="a"))])


def test_memory_ops_and_votes(scaffold):
    new = apply(
        scaffold,
        [
            AddMemory(
                title="Dates", content="Parse dates with pd.to_datetime.", tags=["pandas"], evidence=["t-3"]
            ),
            Vote(target="memory", id="m1", helpful=2),
            Vote(target="rule", id="r2", helpful=1, harmful=3),
            RemoveMemory(id="m1"),
        ],
    )
    assert [(m.id, m.evidence) for m in new.memory] == [("m2", ["t-3"])]
    assert (new.rules[1].helpful, new.rules[1].harmful) == (1, 3)
    assert apply(scaffold, [Vote(target="memory", id="m1", helpful=2)]).memory[0].helpful == 2


def test_limits_can_never_be_raised_past_the_bounds(scaffold):
    with pytest.raises(
        ScaffoldValidationError, match="limits.max_cost_usd: 50.0 exceeds the configured bound 10.0"
    ):
        apply(scaffold, [SetField(field="limits.max_cost_usd", value=50)])


def test_schema_errors_in_the_result_name_the_file(scaffold):
    with pytest.raises(ScaffoldValidationError) as info:
        apply(
            scaffold,
            [SetField(field="limits.max_steps", value=-1), SetField(field="action_format", value="xml")],
        )
    assert {(p.file, p.field) for p in info.value.problems} == {
        ("scaffold.yaml", "limits.max_steps"),
        ("scaffold.yaml", "action_format"),
    }


def test_ops_round_trip_through_json():
    ops = parse_ops([SHOUT_TOOL, {"op": "vote", "target": "rule", "id": "r1", "harmful": 1}])
    again = parse_ops(json.dumps(ops_to_json(ops)))
    assert again == ops
    assert ops_to_json(again)[0]["evidence"] == ["traj-1", "traj-2"]


def test_parse_ops_accepts_what_models_write():
    text = 'Here is my patch:\n```json\n{"ops": [{"op": "add_rule", "text": "Be brief."}]}\n```\nDone.'
    (op,) = parse_ops(text)
    assert isinstance(op, AddRule) and op.text == "Be brief."
    assert parse_ops({"op": "remove_rule", "id": "r1"}) == [RemoveRule(id="r1")]


def test_parse_ops_lists_every_mistake():
    bad = [
        {"op": "add_rules", "text": "x"},
        {"op": "add_rule"},
        {"op": "vote", "target": "tool", "id": "x", "helpful": 1, "colour": 2},
        "remove everything",
    ]
    with pytest.raises(OpError) as info:
        parse_ops(bad)
    message = str(info.value)
    assert "op 0: unknown op 'add_rules'; did you mean 'add_rule'?" in message
    assert "op 1 (add_rule): text: Field required" in message
    assert "op 2 (vote): target: Input should be 'rule' or 'memory'" in message
    assert "op 2 (vote): colour: unknown field" in message
    assert "op 3: must be an object with an 'op' field, got str" in message


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("[{'op': 'add_rule'}]", "edit ops are not valid JSON: Expecting property name"),
        ('"add a rule"', "edit ops must be a JSON list of objects, got str"),
        (42, "edit ops must be a JSON list of objects, got int"),
    ],
)
def test_parse_ops_rejects_non_ops(source, message):
    with pytest.raises(OpError, match=message):
        parse_ops(source)


def test_ops_json_schema_covers_every_op():
    schema = ops_json_schema()
    assert schema["type"] == "array"
    names = {
        definition["properties"]["op"]["const"]
        for definition in schema["$defs"].values()
        if "op" in definition.get("properties", {})
    }
    assert names == set(OP_NAMES)
    assert all(d["required"][0] == "op" for d in schema["$defs"].values() if "op" in d.get("properties", {}))


def test_unknown_ids_in_big_lists_are_summarised(scaffold):
    ops = [AddMemory(id=f"m{i}", title="t", content="c") for i in range(2, 40)]
    with pytest.raises(OpError, match=r"unknown memory item 'zz' \(known: 'm1', .*, \.\.\. \(39 in all\)\)"):
        apply(scaffold, [*ops, RemoveMemory(id="zz")])
