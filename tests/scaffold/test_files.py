"""The directory format: exact round trips, canonical hashing, and clear errors for bad files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recreate.scaffold import (
    Rule,
    ScaffoldError,
    ScaffoldValidationError,
    canonical_files,
    load_scaffold,
    read_dir,
    validate_scaffold,
    write_dir,
)
from recreate.scaffold.model import Example
from tests.scaffold.conftest import echo_tool, make_scaffold


def problems_of(path: Path) -> list[str]:
    with pytest.raises(ScaffoldValidationError) as info:
        read_dir(path)
    return [str(p) for p in info.value.problems]


def test_round_trip_through_a_directory_is_exact(scaffold, tmp_path):
    out = write_dir(scaffold, tmp_path / "s")
    loaded = read_dir(out)
    assert loaded == scaffold
    assert loaded.content_hash() == scaffold.content_hash()
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        "memory.jsonl",
        "scaffold.yaml",
        "tools/echo_text/main.py",
        "tools/echo_text/tool.yaml",
    ]


def test_canonical_yaml_keeps_prompts_readable(scaffold):
    text = canonical_files(scaffold)["scaffold.yaml"].decode()
    assert "system_prompt: |" in text
    assert "tools:\n- echo_text" in text


@pytest.mark.parametrize(
    "change",
    [
        {"rules": [Rule(id="r1", text="Read the task three times.")]},
        {"tools": [echo_tool(code="print('changed')\n")]},
        {"memory": []},
        {"description": "Another description."},
    ],
)
def test_hash_changes_with_any_content(scaffold, change):
    assert make_scaffold(**change).content_hash() != scaffold.content_hash()


def test_hash_ignores_object_identity():
    assert make_scaffold().content_hash() == make_scaffold().content_hash()


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(text=st.text(min_size=1), title=st.text(min_size=1))
def test_any_text_round_trips(tmp_path_factory, text, title):
    scaffold = make_scaffold(
        description=text, rules=[Rule(id="r1", text=text)], system_prompt=text.replace("{", "(")
    )
    scaffold.memory[0].title = title
    out = write_dir(scaffold, tmp_path_factory.mktemp("rt") / "s")
    assert read_dir(out) == scaffold


def test_loading_never_executes_tool_code(tmp_path):
    marker = tmp_path / "executed"
    code = f"open({str(marker)!r}, 'w').write('ran')\nprint('echo: hello')\n"
    out = write_dir(make_scaffold(tools=[echo_tool(code=code)]), tmp_path / "s")
    loaded = load_scaffold(out)
    validate_scaffold(loaded)  # static checks compile the code but never run it
    assert not marker.exists()


def test_yaml_tags_that_would_run_code_are_rejected(scaffold, tmp_path):
    marker = tmp_path / "executed"
    out = write_dir(scaffold, tmp_path / "s")
    evil = f"!!python/object/apply:os.system ['touch {marker}']\n"
    (out / "scaffold.yaml").write_text((out / "scaffold.yaml").read_text() + f"extra: {evil}")
    problems = problems_of(out)
    assert any(p.startswith("scaffold.yaml: malformed YAML") for p in problems)
    assert not marker.exists()


def test_malformed_yaml_names_file_and_line(scaffold, tmp_path):
    out = write_dir(scaffold, tmp_path / "s")
    (out / "tools/echo_text/tool.yaml").write_text("description: ok\nargs: [unclosed\n")
    (problem,) = problems_of(out)
    assert problem.startswith("tools/echo_text/tool.yaml: malformed YAML (line 3")


def test_every_problem_across_files_is_listed(scaffold, tmp_path):
    out = write_dir(scaffold, tmp_path / "s")
    head = yaml.safe_load((out / "scaffold.yaml").read_text())
    del head["system_prompt"], head["instance_template"]
    head["limits"]["max_steps"] = "many"
    head["colour"] = "blue"
    (out / "scaffold.yaml").write_text(yaml.safe_dump(head))
    spec = yaml.safe_load((out / "tools/echo_text/tool.yaml").read_text())
    del spec["description"]
    (out / "tools/echo_text/tool.yaml").write_text(yaml.safe_dump(spec))
    good = json.dumps({"id": "m2", "title": "t", "content": "c"})
    (out / "memory.jsonl").write_text(f'{good}\n{{"id": "m3", \nnot json\n{{"id": "m4", "title": "t"}}\n')
    problems = problems_of(out)
    assert "scaffold.yaml: system_prompt: Field required" in problems
    assert "scaffold.yaml: instance_template: Field required" in problems
    assert any(
        p.startswith("scaffold.yaml: limits.max_steps: Input should be a valid integer") for p in problems
    )
    assert "scaffold.yaml: colour: unknown field" in problems
    assert "tools/echo_text/tool.yaml: description: Field required" in problems
    assert any(p.startswith("memory.jsonl:2: malformed JSON") for p in problems)
    assert any(p.startswith("memory.jsonl:3: malformed JSON") for p in problems)
    assert "memory.jsonl:4: content: Field required" in problems
    assert len(problems) == 8


def test_tool_directory_problems(scaffold, tmp_path):
    out = write_dir(scaffold, tmp_path / "s")
    tool = out / "tools/echo_text"
    (tool / "main.sh").write_text("echo hi\n")
    (tool / "notes.txt").write_text("x")
    (out / "tools/stray").mkdir()
    head = yaml.safe_load((out / "scaffold.yaml").read_text())
    head["tools"].append("ghost")
    (out / "scaffold.yaml").write_text(yaml.safe_dump(head))
    (out / "README.md").write_text("hi")
    problems = problems_of(out)
    assert "tools/echo_text: needs exactly one of main.py, main.sh (found both)" in problems
    assert any(p.startswith("tools/echo_text/notes.txt: unexpected file") for p in problems)
    assert "tools/stray: tool directory not listed in scaffold.yaml tools" in problems
    assert "scaffold.yaml: tools[1]: no directory tools/ghost/" in problems
    assert any(p.startswith("README.md: unexpected file") for p in problems)


def test_fields_set_by_the_layout_are_refused_in_tool_yaml(scaffold, tmp_path):
    out = write_dir(scaffold, tmp_path / "s")
    spec = out / "tools/echo_text/tool.yaml"
    spec.write_text(spec.read_text() + "name: other\n")
    assert problems_of(out) == ["tools/echo_text/tool.yaml: name: set by the directory layout, remove it"]


def test_symlinked_files_are_refused(scaffold, tmp_path):
    out = write_dir(scaffold, tmp_path / "s")
    code = out / "tools/echo_text/main.py"
    code.unlink()
    os.symlink("/etc/hostname", code)
    assert problems_of(out) == ["tools/echo_text/main.py: is a symlink; scaffold files must be regular files"]


def test_missing_scaffold_yaml_and_missing_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    assert problems_of(tmp_path / "empty") == ["scaffold.yaml: missing"]
    with pytest.raises(ScaffoldError, match="not a scaffold directory"):
        read_dir(tmp_path / "nowhere")


def test_write_dir_refuses_to_overwrite(scaffold, tmp_path):
    out = write_dir(scaffold, tmp_path / "s")
    with pytest.raises(ScaffoldError, match="already exists"):
        write_dir(scaffold, out)
    (tmp_path / "empty").mkdir()
    assert read_dir(write_dir(scaffold, tmp_path / "empty")) == scaffold


def test_a_tool_without_a_smoke_test_round_trips(tmp_path):
    scaffold = make_scaffold(tools=[echo_tool(smoke=None)])
    out = write_dir(scaffold, tmp_path / "s")
    assert "smoke" not in (out / "tools/echo_text/tool.yaml").read_text()
    loaded = read_dir(out)
    validate_scaffold(loaded)
    assert loaded == scaffold


WORKED = {"task": "What is 3 + 4?", "steps": [{"command": "echo $((3 + 4))", "output": "7"}, {"submit": "7"}]}


def test_worked_examples_round_trip_and_leave_other_scaffolds_unchanged(scaffold, tmp_path):
    assert "examples" not in canonical_files(scaffold)["scaffold.yaml"].decode()  # old files, old hashes
    with_examples = scaffold.model_copy(update={"examples": [Example(**WORKED)]})
    assert with_examples.content_hash() != scaffold.content_hash()
    loaded = read_dir(write_dir(with_examples, tmp_path / "s"))
    assert loaded == with_examples and loaded.examples[0].steps[1].submit == "7"


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([{"command": "ls", "submit": "x"}], "either `command`"),
        ([{"output": "7"}], "either `command`"),
        ([{"submit": "1"}, {"command": "ls"}], "only the last step"),
        ([], "at least 1 item"),
    ],
)
def test_malformed_worked_examples_are_named(scaffold, tmp_path, steps, message):
    out = write_dir(scaffold, tmp_path / "s")
    doc = yaml.safe_load((out / "scaffold.yaml").read_text())
    doc["examples"] = [{"task": "t", "steps": steps}]
    (out / "scaffold.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ScaffoldValidationError, match=message) as info:
        read_dir(out)
    assert "examples" in str(info.value)
