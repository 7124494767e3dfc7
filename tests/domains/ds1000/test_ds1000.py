import json
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.domains.common import DomainDataError
from recreate.domains.ds1000.domain import inserts_into_function_body, normalize_solution
from recreate.domains.selftest import run_selftest
from tests.domains.ds1000.problems import TEST_EXECUTION, ds1000_domain, task_of

BODY_CONTEXT = 'exec_context = r"""\nimport numpy as np\ndef f(a):\n[insert]\nresult = f(a)\n"""\n'
PLAIN_CONTEXT = 'exec_context = r"""\nimport numpy as np\na = test_input\n[insert]\n"""\n'
# one problem per library, a function-body completion (4) and one with a test_string check (11)
SAMPLE = (
    "ds1000-0",
    "ds1000-4",
    "ds1000-11",
    "ds1000-291",
    "ds1000-313",
    "ds1000-511",
    "ds1000-711",
    "ds1000-820",
)


def test_function_body_detection():
    assert inserts_into_function_body(BODY_CONTEXT)
    assert not inserts_into_function_body(PLAIN_CONTEXT)


def test_normalize_unwraps_fences_and_markers():
    assert (
        normalize_solution("```python\nresult = a.sum()\n```\nexplanation", PLAIN_CONTEXT)
        == "result = a.sum()"
    )
    assert normalize_solution("<code>\nresult = 1\n</code>\nEND SOLUTION", PLAIN_CONTEXT) == "result = 1"


def test_normalize_indents_an_unindented_function_body_only():
    assert normalize_solution("r = a.max()\nreturn r", BODY_CONTEXT) == "    r = a.max()\n    return r"
    indented = "    r = a.max()\n    return r"
    assert normalize_solution(indented, BODY_CONTEXT) == indented
    assert normalize_solution("r = 1", PLAIN_CONTEXT) == "r = 1"


def _write_problem(path: Path, **overrides) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    row = {
        "prompt": "p",
        "reference_code": "result = a.sum()",
        "metadata": {"problem_id": 1, "library": "Numpy", "perturbation_origin_id": 1},
        "code_context": PLAIN_CONTEXT,
    }
    row.update(overrides)
    path.write_text(json.dumps(row) + "\n")
    return path


def test_bad_rows_become_tasks_that_score_zero_with_the_reason(tmp_path):
    _write_problem(tmp_path / "data" / "good.jsonl")
    bad_metadata = {"problem_id": 2, "library": "Numpy", "perturbation_origin_id": 2}
    _write_problem(tmp_path / "data" / "bad.jsonl", code_context="no placeholder here", metadata=bad_metadata)
    domain = get_domain("ds1000", data=tmp_path / "data", env=tmp_path / "env")
    (bad,) = [task for task in domain.tasks() if task.metadata.get("invalid")]
    evaluation = domain.evaluate(bad, "result = 1", sandbox=None)
    assert evaluation.score == 0.0 and "no [insert] placeholder" in evaluation.feedback
    with pytest.raises(DomainDataError, match="no task in .* can be judged by the ds1000 domain"):
        get_domain("ds1000", data=tmp_path / "data" / "bad.jsonl", env=tmp_path / "env")


def test_missing_environment_scores_zero_with_the_fix(tmp_path):
    domain = get_domain("ds1000", data=_write_problem(tmp_path / "p.jsonl"), env=tmp_path / "absent")
    evaluation = domain.evaluate(domain.tasks()[0], "result = 1", sandbox=None)
    assert evaluation.score == 0.0 and "recreate domain setup ds1000" in evaluation.feedback


def test_hidden_tests_are_not_in_the_task(tmp_path):
    task = get_domain("ds1000", data=_write_problem(tmp_path / "p.jsonl")).tasks()[0]
    assert "exec_context" not in json.dumps(task.metadata) + task.prompt


@pytest.fixture(scope="module")
def dev_domain(ds1000_env):
    data = Path(__file__).resolve().parents[4] / "shared" / "data" / "ds1000" / "ds1000_dev.jsonl"
    if not data.is_file():
        pytest.skip("../shared/data is absent")
    return get_domain("ds1000", data=data, env=ds1000_env)


@pytest.mark.shared_data
def test_perturbations_stay_with_their_origin(dev_domain):
    where: dict[str, set[str]] = {}
    for split in ("train", "val", "test"):
        for task in dev_domain.tasks(split):
            where.setdefault(task.group, set()).add(split)
    assert len(where) == 39
    assert all(len(splits) == 1 for splits in where.values())


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.shared_data
def test_sample_references_pass_and_empty_solutions_fail(dev_domain, bwrap):
    tasks = [t for t in dev_domain.tasks() if t.id in SAMPLE]
    assert {t.metadata["library"] for t in tasks} == {"Pandas", "Numpy", "Scipy", "Sklearn", "Matplotlib"}
    report = run_selftest(dev_domain, bwrap, tasks, concurrency=2)
    assert {c.task_id: c.reference.feedback for c in report.reference_failures} == {}
    assert report.false_passes == []


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.shared_data
def test_feedback_shows_expected_and_got(dev_domain, bwrap):
    task = next(t for t in dev_domain.tasks() if t.id == "ds1000-291")
    evaluation = dev_domain.evaluate(task, "result = 12345", bwrap)
    assert not evaluation.passed
    assert "failing check:" in evaluation.feedback
    assert "got: 12345" in evaluation.feedback and "expected (test case 1):" in evaluation.feedback


@pytest.mark.bwrap
@pytest.mark.shared_data
def test_shadowing_runaway_and_vanishing_solutions(ds1000_env, bwrap, tmp_path):
    data = Path(__file__).resolve().parents[4] / "shared" / "data" / "ds1000" / "ds1000_dev.jsonl"
    if not data.is_file():
        pytest.skip("../shared/data is absent")
    domain = get_domain("ds1000", data=data, env=ds1000_env, timeout=5)
    task = next(t for t in domain.tasks() if t.id == "ds1000-291")
    plant = "for p in ('yaml.py', '../yaml.py'):\n    open(p, 'w').write('SHADOWED = True')\n"
    shadow = plant + "import yaml\nassert not hasattr(yaml, 'SHADOWED')\n" + task.reference
    evaluation = domain.evaluate(task, shadow, bwrap)
    assert evaluation.passed, evaluation.feedback
    slow = domain.evaluate(task, "while True:\n    pass", bwrap)
    assert slow.score == 0.0 and "timeout" in slow.feedback
    vanished = domain.evaluate(task, "import os\nos._exit(0)", bwrap)
    assert vanished.score == 0.0 and "without sending its results" in vanished.feedback


SENTINEL_PARTS = ("SENT", "INEL-3b9c")  # joined only at run time, so no file holds it but the test context
TOY_CONTEXT = (
    f'''
import numpy as np

def generate_test_case(test_case_id):
    # {"".join(SENTINEL_PARTS)}: the expected answer lives here and must stay unreadable to the solution
    a = np.arange(6).reshape(2, 3) * test_case_id
    return a, a.cumsum() * 7 + 3

def exec_test(result, ans):
    np.testing.assert_array_equal(result, ans)
    return 1

exec_context = r"""
import numpy as np
a = test_input
[insert]
"""
'''
    + TEST_EXECUTION
)
FORGERIES = {
    "frame walk to the checker, a passing line, exit 0": (
        "import sys, os, json\nf = sys._getframe()\nwhile f is not None:\n"
        "    for k, v in list(f.f_globals.items()) + list(f.f_locals.items()):\n"
        "        if k in ('marker', 'namespace', 'expected_result'):\n"
        "            print(v, json.dumps({'passed': True}), flush=True)\n"
        "    f = f.f_back\nprint(json.dumps({'passed': True}), flush=True)\nos._exit(0)"
    ),
    "print rewritten": (
        "import builtins\n_print = builtins.print\n"
        "builtins.print = lambda *a, **k: _print(*[str(x).replace('false', 'true') for x in a], **k)\n"
        "result = 0"
    ),
    "json.dumps replaced": "import json\njson.dumps = lambda *a, **k: '{\"passed\": true}'\nresult = 0",
    "the comparison replaced": (
        "import numpy as np\nnp.testing.assert_array_equal = lambda *a, **k: None\nresult = 0"
    ),
    "an object equal to anything": (
        "class Anything:\n    def __eq__(self, other):\n        return True\n\n"
        "    __hash__ = None\nresult = Anything()"
    ),
    "a fully masked array (numpy's asserts skip masked elements)": (
        "import numpy as np\nresult = np.ma.masked_all(a.size)"
    ),
    "a masked array of zeros": "import numpy as np\nresult = np.ma.array(np.zeros(a.size), mask=True)",
    "forged result files with a pickle inside": (
        "import numpy as np, json, os\nnp.savez('../results.npz', a0=np.array([os.system], dtype=object))\n"
        "open('../results.json', 'w').write(json.dumps([{'t': 'dict', 'v': []}] * 2))\nos._exit(0)"
    ),
}


LOCAL_CLASS_CONTEXT = (
    '''
import numpy as np

def generate_test_case(test_case_id):
    class Box:  # made inside the test, as DS-1000's Pytorch problems make their models: no importable name
        def __init__(self, a):
            self.a = a
    box = Box(np.arange(4) * test_case_id)
    return box, box.a * 2

def exec_test(result, ans):
    np.testing.assert_array_equal(result, ans)
    return 1

exec_context = r"""
import numpy as np
box = test_input
[insert]
"""
'''
    + TEST_EXECUTION
)


@pytest.fixture(scope="module")
def toy_domain(ds1000_env, tmp_path_factory):
    row = {
        "prompt": "cumulative sum, times 7, plus 3",
        "reference_code": "result = a.cumsum() * 7 + 3",
        "metadata": {"problem_id": 1, "library": "Numpy", "perturbation_origin_id": 1},
        "code_context": TOY_CONTEXT,
    }
    broken = {**row, "metadata": {**row["metadata"], "problem_id": 2}}
    broken["code_context"] = 'raise RuntimeError("broken test context")\nexec_context = "[insert]"\n'
    local_class = {
        **row,
        "metadata": {**row["metadata"], "problem_id": 3},
        "reference_code": "result = box.a * 2",
    }
    local_class["code_context"] = LOCAL_CLASS_CONTEXT
    yield from ds1000_domain([row, broken, local_class], ds1000_env, tmp_path_factory.mktemp("toy"))


@pytest.mark.bwrap
def test_a_broken_test_context_scores_zero_at_once_and_runs_no_solution(toy_domain, bwrap):
    started = time.monotonic()
    evaluation = toy_domain.evaluate(task_of(toy_domain, 2), "result = 1", bwrap)
    assert evaluation.score == 0.0
    assert "failed in loading the test context: RuntimeError: broken test context" in evaluation.feedback
    assert time.monotonic() - started < 30  # not the 60 s + 30 s deadline


@pytest.mark.bwrap
def test_reference_passes_and_a_wrong_answer_fails_with_expected_and_got(toy_domain, bwrap):
    task = task_of(toy_domain, 1)
    assert toy_domain.evaluate(task, task.reference, bwrap).passed
    wrong = toy_domain.evaluate(task, "result = a.cumsum()", bwrap)
    assert (
        not wrong.passed and "expected (test case 1): array([  3,  10,  24,  45,  73, 108])" in wrong.feedback
    )


@pytest.mark.bwrap
def test_a_figure_the_summary_cannot_hold_fails_the_case_saying_why(toy_domain, bwrap):
    task = task_of(toy_domain, 1)
    plot = "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
    broken = toy_domain.evaluate(task, plot + "plt.gcf().get_size_inches = None\n" + task.reference, bwrap)
    assert not broken.passed and "the solution's figure could not be read: TypeError" in broken.feedback
    assert toy_domain.evaluate(task, plot + task.reference, bwrap).passed


@pytest.mark.bwrap
def test_a_test_input_of_a_class_made_inside_the_test_reaches_the_solution(toy_domain, bwrap):
    task = task_of(toy_domain, 3)
    assert toy_domain.evaluate(task, task.reference, bwrap).passed
    assert not toy_domain.evaluate(task, "result = box.a * 3", bwrap).passed


@pytest.mark.bwrap
def test_results_too_large_to_send_fail_saying_so(toy_domain, bwrap):
    large_answer = "import numpy as np\nresult = np.ones(5_000_000)"
    large = toy_domain.evaluate(task_of(toy_domain, 1), large_answer, bwrap)
    assert not large.passed and "MB (all test cases) are too large to send" in large.feedback, large.feedback


@pytest.mark.bwrap
def test_compressed_result_arrays_are_refused_unread(toy_domain, bwrap):
    bomb = (
        "import numpy as np, json, os\nnp.savez_compressed('../results.npz', a0=np.zeros(20_000_000))\n"
        "open('../results.json', 'w').write(json.dumps({'t': 'list', 'v': []}))\nos._exit(0)"
    )
    refused = toy_domain.evaluate(task_of(toy_domain, 1), bomb, bwrap)
    assert not refused.passed and "compressed or larger than their file" in refused.feedback, refused.feedback


@pytest.mark.bwrap
@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_forged_verdicts_score_zero(toy_domain, bwrap, name):
    evaluation = toy_domain.evaluate(task_of(toy_domain, 1), FORGERIES[name], bwrap)
    assert evaluation.score == 0.0 and not evaluation.passed, evaluation.feedback


@pytest.mark.bwrap
def test_the_expected_answer_is_nowhere_the_solution_can_read(toy_domain, bwrap, ds1000_env):
    search = (
        "import os\nneedle = ('SENT' + 'INEL-3b9c').encode()\nfound = []\n"
        "for top in ('/',):\n    for folder, dirs, files in os.walk(top):\n"
        f"        if folder.startswith(('/proc', '/sys', '/dev', '/usr', '/opt', {str(ds1000_env)!r})):\n"
        "            dirs[:] = []\n            continue\n"
        "        for name in files:\n            try:\n"
        "                with open(os.path.join(folder, name), 'rb') as handle:\n"
        "                    if needle in handle.read(1 << 24):\n"
        "                        found.append(os.path.join(folder, name))\n"
        "            except OSError:\n                pass\n"
        "raise RuntimeError(f'FOUND {found}')"
    )
    evaluation = toy_domain.evaluate(task_of(toy_domain, 1), search, bwrap)
    assert "RuntimeError: FOUND []" in evaluation.feedback, evaluation.feedback


def test_the_agent_runs_the_pinned_libraries_read_only_and_first_on_path(bwrap, tmp_path):
    from recreate.sandbox import fresh_session

    data = _write_problem(tmp_path / "one.jsonl")
    assert get_domain("ds1000", data=data, env=tmp_path / "absent").agent_spec().ro_binds == ()
    env = Path(tempfile.mkdtemp(prefix="recreate-fake-env-"))  # a path the sandbox uid can read
    try:
        env.chmod(0o755)
        (env / "bin").mkdir(mode=0o755)
        python = env / "bin" / "python"
        python.write_text("#!/bin/sh\necho pinned-python\n")
        python.chmod(0o755)
        domain = get_domain("ds1000", data=data, env=env)
        with fresh_session(bwrap, domain.agent_spec()) as session:
            ran = session.run("python; echo $MPLBACKEND", timeout=30)
            assert ran.stdout.split() == ["pinned-python", "Agg"], ran
            assert not session.run(f"touch {env}/bin/forged", timeout=30).ok
        assert not (env / "bin" / "forged").exists()
    finally:
        shutil.rmtree(env)
