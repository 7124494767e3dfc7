"""Prompt rendering: system message with rules, instance prompt with the task, sandboxed templates."""

from __future__ import annotations

import pytest

from recreate.scaffold import Rule, ScaffoldError, render_instance, render_system
from tests.scaffold.conftest import make_scaffold


def test_system_message_renders_prompt_then_rules(scaffold):
    text = render_system(scaffold)
    assert text.startswith("You are a careful agent for general.\nUse the tools: echo_text")
    assert text.endswith(
        "## Rules\n- [r1] Read the task twice.\n- [r2] (scope: output) Check the output before submitting."
    )


def test_system_message_without_rules_has_no_rules_section():
    assert "## Rules" not in render_system(make_scaffold(rules=[]))


def test_instance_prompt_holds_the_task_and_extras(scaffold):
    assert render_instance(scaffold, task="Add 2 and 2.", task_id="t-7") == "Task t-7:\nAdd 2 and 2."
    assert render_instance(scaffold, task="Add 2 and 2.") == "Task :\nAdd 2 and 2."


def test_extra_variables_reach_the_template():
    scaffold = make_scaffold(
        instance_template="{{ task }} in {{ workdir }} with {{ files | join(',') }} {{ hint }}"
    )
    text = render_instance(scaffold, task="T", files=["a.py", "b.csv"], hint="(hint)")
    assert text == "T in /workspace with a.py,b.csv (hint)"


def test_undefined_variables_fail_loudly():
    scaffold = make_scaffold(instance_template="{{ task }} {{ nowhere }}")
    with pytest.raises(ScaffoldError, match="instance_template.*'nowhere' is undefined"):
        render_instance(scaffold, task="T")


def test_templates_cannot_reach_python_internals():
    scaffold = make_scaffold(instance_template="{{ task.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ScaffoldError, match="unsafe|not safely|access"):
        render_instance(scaffold, task="T")


def test_rules_keep_their_order():
    rules = [Rule(id="b", text="second"), Rule(id="a", text="first")]
    assert render_system(make_scaffold(rules=rules)).endswith("- [b] second\n- [a] first")
