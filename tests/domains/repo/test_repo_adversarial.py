"""Verdicts a patch must not be able to forge, on small repositories made here: library code that patches
the runner or the json it reports with, a report written before the process is killed, guard bypasses
(quoted paths, binary Python), test files named only by the instance's test ids, pytest 9's pytest.toml,
and instances with no FAIL_TO_PASS test."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.domains.repo import evaluation as judging
from recreate.domains.repo.env import ensure_env, env_path
from recreate.domains.repo.evaluation import clean_patch, run_tests, verdict
from recreate.domains.repo.forgeries import new_file_patch
from recreate.domains.repo.guard import parse, refusal, unquote
from recreate.domains.repo.instance import RepoEnvironment, RepoInstance
from recreate.domains.repo.snapshot import GitRepo, base_tree
from recreate.envbuild import EnvBuildError
from tests.domains.repo.helpers import public_dir

pytestmark = pytest.mark.bwrap
CALC = {
    "calc/__init__.py": "def add(a, b):\n    return a - b\n",
    "tests/test_calc.py": (
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n\n\n"
        "def test_zero():\n    assert add(0, 0) == 0\n"
    ),
}
FIX = "def add(a, b):\n    return a + b\n"
F2P = ("tests/test_calc.py::test_add",)
P2P = ("tests/test_calc.py::test_zero",)
# library code that rewrites the runner's report from inside the test process
PATCHES_THE_RUNNER = """

import __main__ as _m

_orig = _m.Results.report


def _forged(self, *args):
    out = _orig(self, *args)
    out["tests"] = {name: "passed" for name in out["tests"]}
    out["tampered"] = []
    return out


_m.Results.report = _forged
"""
PATCHES_JSON = """

import json as _json

_dumps = _json.dumps


def _forged(obj, *args, **kwargs):
    if isinstance(obj, dict) and "tests" in obj:
        obj = dict(obj, tests={name: "passed" for name in obj["tests"]}, tampered=[])
    return _dumps(obj, *args, **kwargs)


_json.dumps = _forged
"""
# library code that finds the nonce and the pipe in the runner's frames, writes a report of its own and
# kills the process before the runner can write the real one
WRITES_AND_KILLS = """

import json as _j
import os as _o
import signal as _s


def _find():
    try:
        raise ValueError
    except ValueError as error:
        frame = error.__traceback__.tb_frame
    found = {}
    while frame is not None:
        names = frame.f_locals
        if "session" in names and hasattr(names["session"], "items"):
            found["items"] = names["session"].items
        if "job" in names and "results_fd" in names:
            found["job"], found["fd"] = names["job"], names["results_fd"]
        frame = frame.f_back
    return found


_real_add = add


def add(a, b):
    found = _find()
    if "job" in found and "items" in found:
        tests = {item.nodeid: "passed" for item in found["items"]}
        report = {"tests": tests, "messages": {}, "collect_errors": [], "covered": [], "tampered": []}
        _o.write(found["fd"], (found["job"]["nonce"] + "\\n" + _j.dumps(report)).encode())
        _o.kill(_o.getpid(), _s.SIGKILL)
    return _real_add(a, b)
"""


def make_repo(files: dict[str, str]) -> tuple[Path, str]:
    """A git repository (a snapshot the domain reads as it is) with `files` committed once."""
    folder = public_dir("recreate-repo-adversarial-")
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder, GitRepo(folder).commit_all("base")


def diff_of(snapshot: Path, changes: dict[str, str], tmp_path: Path) -> str:
    """`git diff` of a clone of `snapshot` with `changes` written into it (what an agent submits)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(snapshot), str(clone)], check=True)
    for name, text in changes.items():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        (clone / name).write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=clone, check=True)
    return subprocess.run(
        ["git", "diff", "--cached", "--binary"], cwd=clone, capture_output=True
    ).stdout.decode()


def instance_of(snapshot: Path, commit: str, environment: RepoEnvironment, f2p=F2P, p2p=P2P) -> RepoInstance:
    return RepoInstance(
        instance_id="calc__001", repo="calc", base_commit=commit, problem_statement="add subtracts",
        patch="", test_patch="", fail_to_pass=tuple(f2p), pass_to_pass=tuple(p2p),
        environment=environment, snapshot=snapshot,
    )  # fmt: skip


def judge(instance: RepoInstance, patch: str, bwrap, *, guarded: bool = True):
    """The verdict as evaluate() gives it (with the patch check) or past the patch check."""
    tree = base_tree(instance.snapshot, instance.base_commit)
    refused = refusal(clean_patch(patch), tree, instance.environment.pythonpath) if guarded else None
    if refused:
        return None, refused
    env = env_path(instance.environment)
    run = run_tests(bwrap, instance, env, tree, clean_patch(patch), timeout=60)
    return verdict(instance, run, 60), None


@pytest.fixture(scope="module")
def calc(repo_envs):
    snapshot, commit = make_repo(CALC)
    return instance_of(snapshot, commit, RepoEnvironment())


def test_the_fix_resolves_and_no_fix_does_not(calc, bwrap, tmp_path):
    fixed, _ = judge(calc, diff_of(calc.snapshot, {"calc/__init__.py": FIX}, tmp_path), bwrap)
    assert fixed.passed, fixed.feedback
    unfixed, _ = judge(calc, "", bwrap)
    assert not unfixed.passed and unfixed.details["fail_to_pass"] == "0/1"


@pytest.mark.parametrize("code", [PATCHES_THE_RUNNER, PATCHES_JSON], ids=["runner", "json"])
def test_library_code_rewriting_the_report_in_process_is_refused(code, calc, bwrap, tmp_path):
    """Past the patch check too: the runner watches its own module and json, and writes with the
    functions it took before the tests ran."""
    patch = diff_of(calc.snapshot, {"calc/__init__.py": CALC["calc/__init__.py"] + code}, tmp_path)
    evaluation, _ = judge(calc, patch, bwrap, guarded=False)
    assert not evaluation.passed and evaluation.feedback.startswith("refused: the test framework was changed")
    assert ("Results.report" if code is PATCHES_THE_RUNNER else "json.dumps") in evaluation.feedback


def test_a_report_written_before_killing_the_process_is_refused(calc, bwrap, tmp_path):
    patch = diff_of(
        calc.snapshot, {"calc/__init__.py": CALC["calc/__init__.py"] + WRITES_AND_KILLS}, tmp_path
    )
    evaluation, _ = judge(calc, patch, bwrap, guarded=False)
    assert not evaluation.passed and "the test process ended with status -9" in evaluation.feedback
    _, refused = judge(calc, patch, bwrap)
    assert refused and "frames" in refused


def test_the_patch_check_refuses_the_judges_module_and_process_replacement(calc):
    tree = base_tree(calc.snapshot, calc.base_commit)
    for code, what in [
        ("import __main__\n", "the judge's names"),
        ("from __main__ import Results\n", "the judge's names"),
        ("import inspect\nX = inspect.stack()\n", "frames"),
        ("import os\nos.execv('/bin/true', ['true'])\n", "os.exec*"),
        ("import runpy\nrunpy.run_path('data.txt')\n", "dynamic code"),
    ]:
        refused = refusal(new_file_patch("calc/extra.py", code), tree)
        assert refused and what in refused, (code, refused)
    assert refusal(new_file_patch("calc/main.py", 'if __name__ == "__main__":\n    pass\n'), tree) is None


def quoted(patch: str) -> str:
    """The same diff with every path C-quoted, as git apply accepts it."""
    out = []
    for line in patch.splitlines(True):
        if line.startswith("diff --git "):
            a, b = line[len("diff --git ") :].split()
            line = f'diff --git "{a}" "{b}"\n'
        elif line.startswith(("--- a/", "+++ b/")):
            line = f'{line[:4]}"{line[4:].rstrip()}"\n'
        out.append(line)
    return "".join(out)


def test_quoted_paths_are_checked_like_plain_ones(calc, bwrap, tmp_path):
    patch = diff_of(
        calc.snapshot, {"calc/__init__.py": FIX + "\nimport gc\n\nX = gc.get_objects\n"}, tmp_path
    )
    tree = base_tree(calc.snapshot, calc.base_commit)
    assert "frames or gc walking" in refusal(patch, tree)
    assert "frames or gc walking" in refusal(quoted(patch), tree)
    assert [c.path for c in parse(quoted(patch))] == ["calc/__init__.py"]
    assert unquote('"b/caf\\303\\251 x.py"') == "b/café x.py"
    # a quoted diff does apply (what made skipping the check worth it)
    applied, _ = judge(calc, quoted(diff_of(calc.snapshot, {"calc/__init__.py": FIX}, tmp_path / "b")), bwrap)
    assert applied.passed, applied.feedback


def test_python_sent_as_a_binary_patch_is_refused(calc, tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(calc.snapshot), str(clone)], check=True)
    (clone / ".git" / "info" / "attributes").write_text("*.py binary\n")
    (clone / "calc" / "hidden.py").write_text("import gc\n\nX = gc.get_objects\n")
    subprocess.run(["git", "add", "calc/hidden.py"], cwd=clone, check=True)
    patch = subprocess.run(["git", "diff", "--cached", "--binary"], cwd=clone, capture_output=True, text=True)
    assert "GIT binary patch" in patch.stdout
    refused = refusal(patch.stdout, base_tree(calc.snapshot, calc.base_commit))
    assert refused and "binary" in refused
    data = (
        "diff --git a/logo.png b/logo.png\nnew file mode 100644\nindex 0000000..1111111\nGIT binary patch\n"
    )
    assert refusal(data + "literal 1\nIcmZ?l000\n\n", None) is None  # other binary files stay allowed


def test_a_test_file_named_only_by_the_test_ids_is_put_back(repo_envs, bwrap, tmp_path):
    """`python_files = checks.py`: checks.py holds the tests though its name is no test file's."""
    snapshot, commit = make_repo(
        {"calc.py": CALC["calc/__init__.py"], "checks.py": "from calc import add\n\n\ndef test_add():\n"
         "    assert add(2, 2) == 4\n"}
    )  # fmt: skip
    environment = RepoEnvironment(pytest_args=("-o", "python_files=checks.py"))
    instance = instance_of(snapshot, commit, environment, f2p=("checks.py::test_add",), p2p=())
    fixed, _ = judge(instance, diff_of(snapshot, {"calc.py": FIX}, tmp_path / "fix"), bwrap)
    assert fixed.passed, fixed.feedback
    rewritten = diff_of(snapshot, {"checks.py": "def test_add():\n    pass\n"}, tmp_path / "tests")
    evaluation, _ = judge(instance, rewritten, bwrap)
    assert not evaluation.passed and evaluation.details["restored"] == ["checks.py"], evaluation.feedback


def test_a_pytest_toml_added_by_the_patch_is_removed(repo_envs, bwrap, tmp_path):
    """pytest 9 reads pytest.toml before every other configuration file: a patch adding one that
    deselects the failing test (or loads a plugin) must not change the run."""
    environment = RepoEnvironment(install=("pytest==9.0.2",))
    try:
        ensure_env(environment)
    except EnvBuildError as exc:
        pytest.skip(f"cannot build a pytest 9 environment: {exc}")
    snapshot, commit = make_repo(CALC)
    instance = instance_of(snapshot, commit, environment, p2p=())
    config = '[pytest]\naddopts = ["-p", "calc.forge"]\n'
    forge = (
        "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    )
    forge += '    outcome = yield\n    outcome.get_result().outcome = "passed"\n'
    patch = diff_of(snapshot, {"pytest.toml": config, "calc/forge.py": forge}, tmp_path)
    evaluation, _ = judge(instance, patch, bwrap, guarded=False)
    assert not evaluation.passed and "pytest.toml" in evaluation.details["restored"], evaluation.feedback


def test_an_instance_without_fail_to_pass_cannot_resolve(calc, bwrap, tmp_path):
    rows = []
    for instance_id, f2p in (("calc__001", list(F2P)), ("calc__002", [])):
        rows.append(
            {
                "instance_id": instance_id, "repo": "calc", "base_commit": calc.base_commit,
                "snapshot": str(calc.snapshot), "problem_statement": "add", "patch": "-",
                "FAIL_TO_PASS": f2p, "PASS_TO_PASS": list(P2P),
            }
        )  # fmt: skip
    data = tmp_path / "calc.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    domain = get_domain("repo", data=data)
    empty = next(t for t in domain.tasks() if t.id == "calc__002")
    assert "no FAIL_TO_PASS" in empty.metadata["invalid"]
    evaluation = domain.evaluate(empty, "", bwrap)
    assert not evaluation.passed and "cannot be judged" in evaluation.feedback
    # and the verdict itself never resolves what no test decides
    instance = instance_of(calc.snapshot, calc.base_commit, RepoEnvironment(), f2p=())
    report = {"applied": True, "tests": {P2P[0]: "passed"}, "exit": 0}
    assert not verdict(instance, judging.TestRun(report, None, 0.1), 60).passed


def test_the_runner_still_reports_a_suite_that_imports_json_submodules(calc, bwrap, tmp_path):
    """Watching json whole must not refuse ordinary code: importing json.tool adds `tool` to json."""
    code = FIX + "\nimport json.tool  # noqa\n"
    evaluation, _ = judge(calc, diff_of(calc.snapshot, {"calc/__init__.py": code}, tmp_path), bwrap)
    assert evaluation.passed, evaluation.feedback
