"""Hostile or broken scaffolds and edits end in one clear problem, never a hang, a traceback or a read
outside the scaffold: YAML aliases and deep nesting, huge or special files, symlinked folders, deeply
nested JSON and templates, and regexes in a tool's argument schema that backtrack for hours."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from recreate.scaffold import (
    OpError,
    ScaffoldValidationError,
    apply,
    parse_ops,
    read_dir,
    write_dir,
)
from recreate.scaffold import files as scaffold_files
from recreate.scaffold.template_safety import unsafe_reason
from tests.deadline import python_within
from tests.scaffold.conftest import make_scaffold

EVIL_PATTERN = "^(a|a)*$"  # exponential backtracking in Python's re
EVIL_TEXT = "a" * 40 + "!"


def problems_of(path: Path) -> list[str]:
    with pytest.raises(ScaffoldValidationError) as info:
        read_dir(path)
    return [str(p) for p in info.value.problems]


def billion_laughs(levels: int) -> str:
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for n in range(1, levels):
        refs = ", ".join([f"*l{n - 1}"] * 9)
        lines.append(f"l{n}: &l{n} [{refs}]")
    return "\n  ".join(lines)


@pytest.fixture
def written(scaffold, tmp_path) -> Path:
    return write_dir(scaffold, tmp_path / "s")


@pytest.mark.parametrize("rel", ["scaffold.yaml", "tools/echo_text/tool.yaml"])
def test_a_billion_laughs_is_refused_before_it_expands(written, rel):
    target = written / rel
    key = "metadata" if rel == "scaffold.yaml" else "smoke"
    # 9**12 strings once expanded (by hashing, dumping or validating it): far past any memory
    bomb = f"{key}:\n  " + billion_laughs(12) + "\n"
    target.write_text(target.read_text() + bomb)
    problems = problems_of(written)  # (an unread scaffold.yaml lists no tools: one more problem)
    assert (
        problems[0] == f"{rel}: uses a YAML alias (*name), which scaffolds do not expand: write the value out"
    )


def test_absurdly_nested_yaml_is_refused(written):
    spec = written / "tools/echo_text/tool.yaml"
    # libyaml stops at 1000 levels by itself; 500 loaded, and hashing the scaffold then failed
    # ("Maximum serialization depth exceeded"), a traceback wherever it was stored or run
    spec.write_text(spec.read_text() + "smoke: " + "[" * 500 + "]" * 500 + "\n")
    assert problems_of(written) == ["tools/echo_text/tool.yaml: nested deeper than 64 levels; flatten it"]


def test_a_deeply_nested_memory_line_is_one_problem(written):
    (written / "memory.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    assert problems_of(written) == ["memory.jsonl:1: JSON nested too deeply; a memory item is a flat object"]


def test_too_many_memory_items_stop_the_read(written, monkeypatch):
    monkeypatch.setattr(scaffold_files, "MAX_MEMORY_ITEMS", 3)
    item = {"id": "m", "title": "t", "content": "c"}
    lines = [json.dumps({**item, "id": f"m{n}"}) for n in range(10)]
    (written / "memory.jsonl").write_text("\n".join(lines) + "\n")
    assert problems_of(written) == ["memory.jsonl: more than 3 items; remove the ones not needed"]


def test_a_huge_file_is_not_read(written, monkeypatch):
    monkeypatch.setattr(scaffold_files, "MAX_FILE_BYTES", 1024)
    (written / "memory.jsonl").write_text(
        json.dumps({"id": "m1", "title": "t", "content": "x" * 2000}) + "\n"
    )
    assert problems_of(written) == ["memory.jsonl: larger than 1,024 bytes; trim it"]


def test_a_fifo_is_refused_not_read_forever(written):
    (written / "memory.jsonl").unlink()
    os.mkfifo(written / "memory.jsonl")
    outcome: list[object] = []
    reader = threading.Thread(target=lambda: outcome.append(_problems_or_none(written)), daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():  # unblock the reader so the test process can end
        os.close(os.open(written / "memory.jsonl", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading a scaffold with a FIFO for memory.jsonl blocked")
    assert outcome == [["memory.jsonl: is not a regular file (a pipe, device or folder?)"]]


def _problems_or_none(path: Path) -> list[str] | None:
    try:
        read_dir(path)
    except ScaffoldValidationError as exc:
        return [str(p) for p in exc.problems]
    return None


def test_a_tool_that_is_a_file_is_a_problem_not_a_traceback(written):
    folder = written / "tools/echo_text"
    for entry in folder.iterdir():
        entry.unlink()
    folder.rmdir()
    folder.write_text("not a folder\n")
    assert problems_of(written) == ["tools/echo_text: is not a directory; a tool is a directory"]


def test_symlinked_tool_folders_are_refused(written, tmp_path):
    outside = tmp_path / "outside"
    (written / "tools/echo_text").rename(outside)  # regular files, but outside the scaffold
    (written / "tools/echo_text").symlink_to(outside)
    assert problems_of(written) == ["tools/echo_text: is a symlink; a tool is a directory"]


def test_a_symlinked_tools_folder_is_refused(written, tmp_path):
    outside = tmp_path / "outside_tools"
    (written / "tools").rename(outside)
    (written / "tools").symlink_to(outside)
    problems = problems_of(written)
    assert "tools: is a symlink; scaffold folders must be real directories" in problems


def test_deeply_nested_edit_ops_are_an_op_error():
    with pytest.raises(OpError, match="nested too deeply"):
        parse_ops("[" * 100_000 + "]" * 100_000)


def nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


@pytest.mark.parametrize("where", ["args", "smoke"])
def test_deeply_nested_tool_data_is_a_problem_not_a_recursion_error(scaffold, where):
    deep = nested(400)
    op = {
        "op": "add_tool",
        "name": "deep",
        "description": "A deep tool.",
        "args": deep if where == "args" else {"type": "object"},
        "smoke": {"args": deep if where == "smoke" else {}},
        "code": "print(1)\n",
    }
    with pytest.raises(ScaffoldValidationError) as info:
        apply(scaffold, [op])
    field = "args" if where == "args" else "smoke.args"
    assert [(p.file, p.field) for p in info.value.problems] == [("tools/deep/tool.yaml", field)]
    assert "nested" in info.value.problems[0].message


@pytest.mark.parametrize(
    "template",
    [
        "{{ " + "(" * 3000 + "task" + ")" * 3000 + " }}",
        "{% if 1 %}" * 300 + "{{ task }}" + "{% endif %}" * 300,
    ],
)
def test_a_template_nested_too_deeply_is_a_problem(scaffold, template):
    with pytest.raises(ScaffoldValidationError) as info:
        apply(scaffold, [{"op": "set_field", "field": "instance_template", "value": template}])
    (problem,) = info.value.problems
    assert (problem.file, problem.field) == ("scaffold.yaml", "instance_template")
    assert "nested too deeply" in problem.message


def test_valid_patterns_in_a_tool_schema_still_check_the_smoke_arguments(scaffold):
    op = {
        "op": "add_tool",
        "name": "lower",
        "description": "Lower-case words only.",
        "args": {"type": "object", "properties": {"word": {"type": "string", "pattern": "^[a-z]+$"}}},
        "smoke": {"args": {"word": "ABC"}},
        "code": "print(1)\n",
    }
    with pytest.raises(ScaffoldValidationError) as info:
        apply(scaffold, [op])
    assert [str(p) for p in info.value.problems] == [
        "tools/lower/tool.yaml: smoke.args.word: does not match the args schema: "
        "'ABC' does not match '^[a-z]+$'"
    ]
    op["smoke"] = {"args": {"word": "abc"}}
    assert apply(scaffold, [op]).tool("lower").args == op["args"]


CATASTROPHIC_EDIT = f"""
import recreate.scaffold.bounded as bounded
from recreate.scaffold import ScaffoldValidationError, apply
from tests.scaffold.conftest import make_scaffold

bounded.RENDER_TIMEOUT_S = 2.0
op = {{
    "op": "add_tool",
    "name": "evil",
    "description": "Backtracks.",
    "args": {{"type": "object", "properties": {{"s": {{"type": "string", "pattern": {EVIL_PATTERN!r}}}}}}},
    "smoke": {{"args": {{"s": {EVIL_TEXT!r}}}}},
    "code": "print(1)\\n",
}}
try:
    apply(make_scaffold(), [op])
except ScaffoldValidationError as exc:
    print("REFUSED", *exc.problems, sep="\\n")
"""


def test_a_catastrophic_regex_in_an_edit_does_not_hang_the_host():
    """Before the fix the smoke arguments were matched in process: `^(a|a)*$` on 40 characters held
    the GIL for hours (so the check runs in a child with a deadline)."""
    done = python_within(
        CATASTROPHIC_EDIT, hung="validating an edit whose schema has a backtracking regex hung the process"
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "REFUSED"
    assert lines[1].startswith("tools/evil/tool.yaml: smoke.args: checking the arguments")
    assert "took longer than 2 s" in lines[1]


def test_the_previous_version_stays_intact_after_hostile_edits(store):
    info = store.commit(make_scaffold())
    before = sorted(p.read_bytes() for p in store.root.rglob("*") if p.is_file())
    for ops in (
        "[" * 100_000 + "]" * 100_000,
        [
            {
                "op": "add_tool",
                "name": "d",
                "description": "d",
                "args": nested(400),
                "smoke": {},
                "code": "x=1\n",
            }
        ],
    ):
        with pytest.raises((OpError, ScaffoldValidationError)):
            store.apply(info.ref, ops)
    after = sorted(p.read_bytes() for p in store.root.rglob("*") if p.is_file())
    assert after == before and store.versions("demo") == [1]


def ref_bomb(levels: int) -> dict:
    """Definitions that each use the one before twice: 2**levels values once every $ref is inlined."""
    defs = {"d0": {"type": "string"}}
    for n in range(1, levels):
        ref = {"$ref": f"#/$defs/d{n - 1}"}
        defs[f"d{n}"] = {"type": "object", "properties": {"a": ref, "b": ref}}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": f"#/$defs/d{levels - 1}"}}}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (ref_bomb(40), "its $refs expand to"),
        ({"type": "object", "properties": {"x": {"$ref": "#/$defs/nowhere"}}}, "points nowhere"),
        ({"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}}, "points nowhere"),
    ],
)
def test_unusable_refs_in_a_tool_schema_are_refused(scaffold, args, message):
    """LangChain inlines every $ref to show a tool to a model (2**40 values here), and a ref that does
    not resolve fails each call of the tool: both are refused when the edit is validated."""
    op = {"op": "add_tool", "name": "refs", "description": "d", "args": args, "smoke": {}, "code": "x=1\n"}
    with pytest.raises(ScaffoldValidationError) as info:
        apply(scaffold, [op])
    (problem,) = info.value.problems
    assert (problem.file, problem.field) == ("tools/refs/tool.yaml", "args")
    assert message in problem.message


def test_a_small_schema_with_refs_still_validates(scaffold):
    args = ref_bomb(3)
    op = {"op": "add_tool", "name": "refs", "description": "d", "args": args, "code": "x=1\n"}
    assert apply(scaffold, [{**op, "smoke": {"args": {"x": {"a": {"a": "s"}}}}}]).tool("refs").args == args
    with pytest.raises(ScaffoldValidationError, match=r"smoke.args.x.a.a: does not match"):
        apply(scaffold, [{**op, "smoke": {"args": {"x": {"a": {"a": 1}}}}}])


def test_an_edit_to_the_worked_examples_shows_in_the_diff(store):
    """The diff is how a person reviews what the meta-agent changed: a new worked example (earlier
    turns of every run's conversation) was missing from it ("identical")."""
    first = store.commit(make_scaffold())
    op = {"op": "add_example", "task": "What is 2 + 2?", "steps": [{"command": "echo 4", "output": "4"}]}
    second = store.apply(first.ref, [op])
    diff = store.diff(first.ref, second.ref)
    assert diff.components() == ["examples"]
    assert diff.render().endswith("+ [examples] #1: What is 2 + 2?")


def test_a_template_too_deep_for_the_safety_check_is_not_vouched_for():
    """mini-swe-agent renders exported templates with plain Jinja: one our parser gives up on (Python's
    recursion limit) but a process with a higher limit parses was passed as safe, payload and all."""
    template = "{{ " + "(" * 300 + "cycler.__init__.__globals__" + ")" * 300 + " }}"
    assert unsafe_reason(template) == "nested too deeply to check"
    assert unsafe_reason("{{ (((task))) }}") is None
