"""Sandbox checks: shell syntax and every tool's smoke test run inside a real bubblewrap sandbox."""

from __future__ import annotations

import shutil

import pytest

from recreate.sandbox import get_sandbox
from recreate.scaffold import (
    AddTool,
    Bounds,
    ScaffoldStore,
    ScaffoldValidationError,
    SmokeTest,
    UpdateTool,
    load_scaffold,
    validate_scaffold,
)
from tests.scaffold.conftest import SEEDS, echo_tool, make_scaffold, tree_snapshot

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="bubblewrap is not installed (apt-get install bubblewrap)"
    ),
]

SHELL_CODE = (
    'text=$(python3 -c \'import json,sys; print(json.loads(sys.argv[1])["text"])\' "$1")\n'
    'echo "shell: $text"\n'
)


def sandbox_problems(scaffold, **kwargs) -> list[str]:
    with pytest.raises(ScaffoldValidationError) as info:
        validate_scaffold(scaffold, sandbox=get_sandbox("bwrap"), **kwargs)
    return [str(p) for p in info.value.problems]


def test_seed_tools_pass_their_smoke_tests():
    for seed in ("minimal", "math", "ds1000"):
        validate_scaffold(load_scaffold(SEEDS / seed), sandbox=get_sandbox("bwrap"))


def test_python_and_shell_tools_pass(scaffold):
    shell = echo_tool(
        name="shell_echo",
        language="bash",
        code=SHELL_CODE,
        smoke=SmokeTest(args={"text": "hi"}, expect="shell: hi"),
    )
    validate_scaffold(make_scaffold(tools=[scaffold.tools[0], shell]), sandbox=get_sandbox("bwrap"))


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        (
            echo_tool(smoke=SmokeTest(args={"text": "hi"}, expect="goodbye")),
            "tools/echo_text/tool.yaml: smoke.expect: smoke test stdout lacks 'goodbye'; got: echo: hi",
        ),
        (
            echo_tool(code="import sys\nsys.exit(3)\n"),
            "tools/echo_text/tool.yaml: smoke.exit_code: smoke test exited 3, expected 0",
        ),
        (
            echo_tool(code="raise SystemExit('boom')\n"),
            "tools/echo_text/tool.yaml: smoke.exit_code: smoke test exited 1, expected 0; stderr: boom",
        ),
        (echo_tool(language="bash", code="if then fi\n"), "tools/echo_text/main.sh: shell syntax error"),
        (
            echo_tool(code="open('/etc/escape', 'w')\n"),
            "tools/echo_text/tool.yaml: smoke.exit_code: smoke test exited 1",
        ),
    ],
)
def test_failing_smoke_tests_are_named(tool, expected):
    found = sandbox_problems(make_scaffold(tools=[tool]))
    assert len(found) == 1 and found[0].startswith(expected), found


def test_a_hanging_tool_times_out():
    tool = echo_tool(code="import time\ntime.sleep(30)\n")
    assert sandbox_problems(make_scaffold(tools=[tool]), bounds=Bounds(smoke_timeout_s=1)) == [
        "tools/echo_text/tool.yaml: smoke: smoke test timed out after 1 s"
    ]


def test_every_failing_tool_is_reported():
    tools = [echo_tool(name="a", code="import sys\nsys.exit(2)\n"), echo_tool(name="b", code="print('no')\n")]
    assert [p.split(":")[0] for p in sandbox_problems(make_scaffold(tools=tools))] == [
        "tools/a/tool.yaml",
        "tools/b/tool.yaml",
    ]


def test_store_refuses_a_tool_whose_smoke_test_fails(tmp_path, scaffold):
    store = ScaffoldStore(tmp_path / "store")
    store.commit(scaffold)
    before = tree_snapshot(store.root)
    with pytest.raises(ScaffoldValidationError, match="smoke test exited 1"):
        broken = UpdateTool(name="echo_text", code="print(undefined_name)\n")
        store.apply("demo", [broken], sandbox=get_sandbox("bwrap"))
    assert tree_snapshot(store.root) == before
    good = AddTool(
        name="louder",
        description="Echo.",
        smoke=SmokeTest(args={"text": "x"}, expect="echo: x"),
        code=scaffold.tools[0].code,
    )
    info = store.apply("demo", [good], sandbox=get_sandbox("bwrap"))
    assert info.validated == {"static": True, "sandbox": "bwrap"}


def test_sound_tools_are_smoke_tested_beside_static_problems():
    tools = [
        echo_tool(name="broken", code="print(:\n"),
        echo_tool(name="failing", code="print('no')\n"),
        echo_tool(name="untested", language="bash", code="if then fi\n", smoke=None),
        echo_tool(name="fine"),
    ]
    found = sandbox_problems(make_scaffold(instance_template="no task", tools=tools))
    assert [p.split(": ")[0] for p in found] == [
        "scaffold.yaml",
        "tools/broken/main.py",
        "tools/failing/tool.yaml",
        "tools/untested/main.sh",
    ]


def test_a_sandbox_given_by_name_is_refused_naming_the_resolver() -> None:
    """The scaffold package does not pick backends: the caller resolves a name (one floor up)."""
    with pytest.raises(TypeError, match=r"recreate\.sandbox\.get_sandbox\('bwrap'\)"):
        validate_scaffold(make_scaffold(tools=[echo_tool()]), sandbox="bwrap")  # type: ignore[arg-type]
