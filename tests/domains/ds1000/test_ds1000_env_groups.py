"""The DS-1000 environment's optional library groups (PyTorch, TensorFlow), and tests the environment
cannot run: a task whose test imports a library the environment lacks, or whose test fails before any
solution is judged, is the evaluation's failure (named, with the fix), never a zero for the solution."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.domains.ds1000.env import (
    GROUPS,
    REQUIREMENTS,
    STAMP,
    EnvBuildError,
    ensure_env,
    installed_extras,
    is_ready,
    missing_modules,
    requirements,
    setup_hint,
)
from recreate.domains.ds1000.judge import needed_modules
from recreate.evaluation.preflight import PreflightError, preflight
from recreate.evaluation.rollout import ERROR_KEY, REASON_KEY, Rollouts
from tests.domains.ds1000.problems import TEST_EXECUTION, ds1000_domain, task_of

REPO = Path(__file__).resolve().parents[3]

CONTEXT = '''
import numpy as np
{imports}

def generate_test_case(test_case_id):
    a = np.arange(4) * test_case_id
    {generate}
    return a, a * 2

def exec_test(result, ans):
    np.testing.assert_array_equal(result, ans)
    return 1

exec_context = r"""
import numpy as np
a = test_input
[insert]
"""
'''


def fake_env(folder: Path, pins: list[str]) -> Path:
    """A folder that reads as a venv built with `pins` (the stamp and an interpreter's path)."""
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").write_text("")
    (folder / STAMP).write_text("\n".join(["/usr/bin/python3.11", *pins]) + "\n")
    return folder


def problem(problem_id: int, *, imports: str = "", generate: str = "pass") -> dict:
    return {
        "prompt": "double the array",
        "reference_code": "result = a * 2",
        "metadata": {"problem_id": problem_id, "library": "Numpy", "perturbation_origin_id": problem_id},
        "code_context": CONTEXT.format(imports=imports, generate=generate) + TEST_EXECUTION,
    }


def test_a_build_reads_as_ready_for_the_groups_it_was_built_with_only(tmp_path):
    both = fake_env(tmp_path / "both", requirements(["pytorch", "tensorflow"]))
    assert is_ready(both) and is_ready(both, ["pytorch"]) and is_ready(both, GROUPS)
    assert installed_extras(both) == ["pytorch", "tensorflow"]
    base = fake_env(tmp_path / "base", list(REQUIREMENTS))
    assert is_ready(base) and not is_ready(base, ["tensorflow"]) and installed_extras(base) == []
    stale = fake_env(tmp_path / "stale", [*REQUIREMENTS, "torch==1.0"])  # a pin of another day: rebuilt
    assert not is_ready(stale) and installed_extras(stale) == []
    half = fake_env(tmp_path / "half", [*REQUIREMENTS, "tensorflow-cpu==2.16.1"])  # a group's pins in part
    assert not is_ready(half) and installed_extras(half) == []
    extra = fake_env(tmp_path / "extra", [*requirements(["pytorch"]), "jax==0.4"])
    assert not is_ready(extra)
    with pytest.raises(EnvBuildError, match="unknown DS-1000 library group 'torch'; known: pytorch"):
        requirements(["torch"])


def test_the_agent_is_told_the_libraries_the_environment_has(tmp_path):
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps(problem(1)) + "\n")
    base = get_domain("ds1000", data=data, env=fake_env(tmp_path / "base", list(REQUIREMENTS))).describe()
    assert "NumPy, Pandas, SciPy, scikit-learn and Matplotlib (pinned: numpy 1.26" in base
    assert "torch" not in base and "TensorFlow" not in base
    env = fake_env(tmp_path / "both", requirements(["pytorch", "tensorflow"]))
    both = get_domain("ds1000", data=data, env=env).describe()
    assert "Matplotlib, PyTorch and TensorFlow (pinned: numpy 1.26" in both
    assert "matplotlib 3.8, torch 2.13, tensorflow 2.16)" in both


def test_asking_for_groups_an_env_has_builds_nothing(ds1000_env):
    stamp = (ds1000_env / STAMP).stat().st_mtime_ns
    assert ensure_env(ds1000_env, extras=["tensorflow"]) == ds1000_env
    assert (ds1000_env / STAMP).stat().st_mtime_ns == stamp


def test_a_group_that_does_not_exist_is_refused_in_one_line(tmp_path):
    def stderr_of(*args: str) -> str:
        done = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert done.returncode in (1, 2) and "Traceback" not in done.stderr
        return done.stderr.strip()

    recreate = (sys.executable, "-m", "recreate", "domain", "setup")
    assert stderr_of(*recreate, "ds1000", "--with", "torch", "--path", str(tmp_path / "e")) == (
        "error: Invalid value for --with: unknown library group 'torch'; known: pytorch, tensorflow, all"
    )
    assert stderr_of(*recreate, "repo", "--with", "pytorch") == (
        "error: Invalid value for --with: only ds1000's environment has optional library groups"
    )
    assert stderr_of(str(REPO / "scripts" / "ds1000_env.sh"), str(tmp_path / "e"), "--with", "nope") == (
        "error: unknown DS-1000 library group 'nope'; known: pytorch, tensorflow"
    )
    assert not (tmp_path / "e").exists()


def test_setup_with_data_adds_the_groups_its_tasks_need(tmp_path):
    torch_task = problem(5) | {"metadata": {"problem_id": 5, "library": "Pytorch"}}
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(problem(1)) + "\n" + json.dumps(torch_task) + "\n")

    def setup(env: Path, *args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "recreate", "domain", "setup", "ds1000", "--data", str(tasks)]
        return subprocess.run([*command, "--path", str(env), *args], capture_output=True, text=True, cwd=REPO)

    done = setup(fake_env(tmp_path / "built", requirements(["pytorch"])))
    assert done.returncode == 0 and "DS-1000 environment ready" in done.stdout, done.stderr
    # an env without the group is rebuilt with it (here on a Python that fails at once)
    done = setup(fake_env(tmp_path / "base", list(REQUIREMENTS)), "--python", "/bin/false")
    assert done.returncode == 1 and "building the DS-1000 environment with pytorch in" in done.stdout


def test_the_hint_names_the_groups_that_provide_the_missing_modules(tmp_path):
    env = tmp_path / "env"
    assert f"`recreate domain setup ds1000 --with pytorch --path {env}`" in setup_hint(env, ["torch"])
    assert "--with pytorch,tensorflow " in setup_hint(env, ["tensorflow", "torch"])
    assert "leave those tasks out" in setup_hint(env, ["torch", "gensim"])


def test_a_task_needs_what_its_test_and_its_solutions_sandbox_import_and_its_librarys_module():
    context = (
        'import numpy as np\nexec_context = r"""\nimport tensorflow.keras as k\ndef f(x):\n[insert]\n"""\n'
    )
    assert needed_modules(context, None) == {"numpy", "tensorflow"}
    assert needed_modules("import numpy\n", "Pytorch") == {"numpy", "torch"}
    assert needed_modules("this is no python (", "Tensorflow") == {"tensorflow"}


def test_an_environment_not_built_is_named_with_the_groups_the_tasks_need(tmp_path):
    torch_task = problem(5) | {"metadata": {"problem_id": 5, "library": "Pytorch"}}
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(problem(1)) + "\n" + json.dumps(torch_task) + "\n")
    why = get_domain("ds1000", data=path, env=tmp_path / "absent").environment_problem()
    assert why.startswith(f"the DS-1000 environment is missing at {tmp_path / 'absent'}; build it with")
    assert "`recreate domain setup ds1000 --with pytorch`" in why
    path.write_text(json.dumps(problem(1)) + "\n")
    plain = get_domain("ds1000", data=path, env=tmp_path / "absent").environment_problem()
    assert "`recreate domain setup ds1000`" in plain


def test_the_probe_names_the_top_level_modules_the_env_lacks(ds1000_env):
    asked = ["torch.nn.functional", "tensorflow", "numpy", "no_such_library_9f2.sub", "keras"]
    assert missing_modules(ds1000_env, asked) == ["no_such_library_9f2"]


@pytest.fixture(scope="module")
def lacking(ds1000_env, tmp_path_factory):
    """Two tasks: one importing a library the environment lacks, one whose test generation fails."""
    in_the_solutions_sandbox = problem(4)  # its test imports the library only where the solution runs
    in_the_solutions_sandbox["code_context"] = in_the_solutions_sandbox["code_context"].replace(
        "import numpy as np\na = test_input", "import numpy as np\nimport no_such_library_9f2\na = test_input"
    )
    rows = [
        problem(1),
        problem(2, imports="import no_such_library_9f2"),
        problem(3, generate="raise ValueError('this test cannot make its cases')"),
        in_the_solutions_sandbox,
    ]
    yield from ds1000_domain(rows, ds1000_env, tmp_path_factory.mktemp("lacking"))


@pytest.mark.bwrap
def test_a_task_needing_a_library_the_env_lacks_is_refused_before_the_run(lacking, bwrap, tmp_path):
    why = lacking.environment_problem()
    assert why.startswith("2 tasks (e.g. ds1000-2) import no_such_library_9f2, which the DS-1000 env")
    assert "leave those tasks out" in why
    with pytest.raises(PreflightError, match="domain ds1000: 2 tasks"):
        preflight(bwrap, lacking, tmp_path)
    for problem_id in (2, 4):  # the same words for every such task: the selftest lists them on one line
        verdict = lacking.evaluate(task_of(lacking, problem_id), "result = a * 2", bwrap)
        assert verdict.score == 0.0 and verdict.details["error"].startswith(
            "the task imports no_such_library_9f2, which the DS-1000 environment at"
        )
    fine = task_of(lacking, 1)  # the other tasks are judged as ever
    assert lacking.evaluate(fine, fine.reference, bwrap).passed


@pytest.mark.bwrap
def test_a_test_that_fails_before_judging_is_the_evaluations_error_not_a_zero(lacking, bwrap, openai_server):
    from recreate.testing import tool_call
    from tests.evaluation.conftest import MINIMAL

    task = task_of(lacking, 3)
    verdict = lacking.evaluate(task, task.reference, bwrap)
    assert verdict.score == 0.0 and "fails before any solution is judged" in verdict.details["error"]
    assert "generating the test cases: ValueError: this test cannot make its cases" in verdict.feedback
    openai_server.enqueue(tool_call("submit", {"answer": "result = a * 2"}))
    traj = Rollouts(MINIMAL, lacking, model=f"scripted@{openai_server.url}", sandbox=bwrap, cache=False).run(
        task, seed=0
    )
    assert traj.evaluation is None and traj.metadata[ERROR_KEY] == "evaluator"  # not scored, run again
    assert "fails before any solution is judged" in traj.metadata[REASON_KEY]
