"""`recreate domain ...` end to end through the real CLI, sandbox and example files."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recreate.cli import app, register

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "custom_domain"
runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def _registered():
    if not any(group.name == "domain" for group in app.registered_groups):
        register()


def test_domain_list():
    result = runner.invoke(app, ["domain", "list"])
    assert result.exit_code == 0
    for name in ("math", "ds1000", "jsonl"):
        assert name in result.output


def test_unknown_domain_is_a_clear_error():
    result = runner.invoke(app, ["domain", "selftest", "nope", "--data", str(EXAMPLE / "tasks.jsonl")])
    assert result.exit_code != 0
    assert "unknown domain 'nope'" in str(result.exception)


@pytest.mark.bwrap
def test_selftest_on_the_custom_domain_example(bwrap, open_tmp):
    # run from a copy under /tmp: the evaluator folder is bound in, nothing depends on the repo
    example = shutil.copytree(EXAMPLE, open_tmp / "custom_domain")
    command = [
        "domain",
        "selftest",
        "jsonl",
        "--data",
        str(example / "tasks.jsonl"),
        "--evaluator",
        "python3 /evaluator/evaluate.py",
    ]
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == "reference_pass=16/16 wrong_pass=0/16 forgery_pass=0/4"
    assert re.search(r"strings\s+│\s+6\s+│\s+6/6", result.output)


@pytest.mark.bwrap
def test_selftest_exits_1_when_a_wrong_solution_passes(bwrap, open_tmp):
    lax = open_tmp / "lax"
    lax.mkdir()
    (lax / "tasks.jsonl").write_text('{"id": "a", "task": "t", "expected": "x"}\n')
    result = runner.invoke(
        app, ["domain", "selftest", "jsonl", "--data", str(lax / "tasks.jsonl"), "--evaluator", "true"]
    )
    assert result.exit_code == 1
    assert "reference_pass=1/1 wrong_pass=1/1" in result.output
    assert "wrong solution passed" in result.output


# The pattern the example used before: the judge runs the submission in its own process, and the expected
# answer sits in task.json beside it. Both forgery probes pass against it.
NAIVE_EVALUATOR = """
import json, pathlib
task = json.loads(pathlib.Path("task.json").read_text())
namespace = {}
exec(pathlib.Path("submission.txt").read_text(), namespace)
function = namespace.get("double")
ok = callable(function) and function(2) == 4
print(json.dumps({"score": float(ok), "feedback": "checked"}))
"""


def _naive_domain(folder: Path) -> Path:
    folder.mkdir()
    row = {"id": "d", "task": "Write double(x).", "expected": "def double(x):\n    return 2 * x\n"}
    (folder / "tasks.jsonl").write_text(json.dumps(row) + "\n")
    (folder / "judge.py").write_text(NAIVE_EVALUATOR)
    return folder / "tasks.jsonl"


@pytest.mark.bwrap
def test_selftest_exits_1_when_a_forgery_passes(bwrap, open_tmp):
    tasks = _naive_domain(open_tmp / "naive")
    command = [
        "domain",
        "selftest",
        "jsonl",
        "--data",
        str(tasks),
        "--evaluator",
        "python3 /evaluator/judge.py",
    ]
    result = runner.invoke(app, command)
    assert result.exit_code == 1, result.output
    assert "reference_pass=1/1 wrong_pass=0/1 forgery_pass=1/1" in result.output
    assert "forgery passed" in result.output
    assert "prints a passing verdict and exits 0" in result.output
    assert "reads every file it can see and prints it" in result.output


@pytest.mark.bwrap
def test_selftest_exits_1_when_references_fail(bwrap, open_tmp):
    tasks = _naive_domain(open_tmp / "broken")
    command = ["domain", "selftest", "jsonl", "--data", str(tasks), "--evaluator", "exit 1"]
    result = runner.invoke(app, command)
    assert result.exit_code == 1, result.output
    assert "reference_pass=0/1 wrong_pass=0/1 forgery_pass=0/1" in result.output
    assert "only 0.0% of the reference solutions pass" in result.output
    tolerant = runner.invoke(app, [*command, "--min-reference-pass", "0"])
    assert tolerant.exit_code == 0, tolerant.output


def test_setup_of_a_domain_without_environment():
    result = runner.invoke(app, ["domain", "setup", "math"])
    assert result.exit_code == 0 and "needs no environment" in result.output


def test_setup_and_script_are_fast_no_ops_on_a_ready_environment(ds1000_env):
    result = runner.invoke(app, ["domain", "setup", "ds1000", "--path", str(ds1000_env)])
    assert result.exit_code == 0 and "ready" in result.output
    script = subprocess.run(
        [str(REPO / "scripts" / "ds1000_env.sh"), str(ds1000_env)], capture_output=True, text=True, timeout=60
    )
    assert script.returncode == 0 and script.stdout.strip().splitlines()[-1] == str(ds1000_env)


@pytest.mark.bwrap
def test_selftest_says_a_reason_shared_by_every_task_once(bwrap, tmp_path):
    context = 'exec_context = r"""\nimport numpy as np\na = test_input\n[insert]\n"""\n'
    rows = [
        {
            "prompt": "p",
            "reference_code": "result = a.sum()",
            "metadata": {"problem_id": n, "library": "Numpy", "perturbation_origin_id": n},
            "code_context": context,
        }
        for n in range(5)
    ]
    data = tmp_path / "ds.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    command = ["domain", "selftest", "ds1000", "--data", str(data), "-o", f"env={tmp_path / 'absent'}"]
    result = runner.invoke(app, command)
    assert result.exit_code == 1 and "reference_pass=0/5" in result.output, result.output
    failed = [line for line in result.output.splitlines() if line.startswith("reference failed")]
    assert len(failed) == 1 and "and 2 more" in failed[0] and "recreate domain setup ds1000" in failed[0]
