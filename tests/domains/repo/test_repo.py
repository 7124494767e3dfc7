"""The repo domain on real instances (built from a tiny real sdist): workspace, judging, tamper-proofing."""

from __future__ import annotations

import difflib
import io
import json
import re
import socket
import tarfile

import pytest

from recreate.domains import DomainDataError, get_domain
from recreate.domains.repo.domain import FORGED_CONFTEST, new_file_patch
from recreate.domains.repo.instance import swebench_image
from recreate.domains.repo.snapshot import base_tree
from recreate.sandbox import fresh_session
from tests.domains.repo.helpers import SOURCES

pytestmark = pytest.mark.bwrap


@pytest.fixture(scope="module")
def domain(tiny_dataset):
    return get_domain("repo", data=tiny_dataset[0])


def test_gold_patch_resolves_and_the_wall_times_are_reported(domain, bwrap):
    task = domain.tasks()[0]
    evaluation = domain.evaluate(task, task.reference, bwrap)
    assert evaluation.passed and evaluation.score == 1.0, evaluation.feedback
    assert evaluation.feedback.startswith("resolved")
    details = evaluation.details
    assert details["fail_to_pass"].split("/")[0] == details["fail_to_pass"].split("/")[1] != "0"
    assert details["setup_s"] > 0 and details["tests_s"] > 0 and details["eval_wall_s"] >= details["tests_s"]


def test_empty_and_reverted_patches_do_not_resolve(domain, bwrap):
    task = domain.tasks()[0]
    empty = domain.evaluate(task, "", bwrap)
    assert not empty.passed and "tests that should pass after the fix but do not" in empty.feedback
    reverted = domain.evaluate(task, domain.wrong_submissions(task)[1], bwrap)
    assert not reverted.passed and "does not apply" in reverted.feedback


def file_patch(path: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def base_file(domain, task, path: str) -> str:
    instance = domain.instance(task)
    with tarfile.open(fileobj=io.BytesIO(base_tree(instance.snapshot, instance.base_commit))) as tar:
        return tar.extractfile(path).read().decode()


def test_a_patch_that_changes_the_tests_cannot_make_them_pass(domain, bwrap):
    task = domain.tasks()[0]
    instance = domain.instance(task)
    path = instance.fail_to_pass[0].split("::")[0]
    names = sorted({t.split("::")[1].split("[")[0] for t in instance.fail_to_pass})
    passing_tests = "".join(f"def {name}(*args):\n    pass\n\n\n" for name in names)
    rewritten = file_patch(path, base_file(domain, task, path), passing_tests)
    forged = new_file_patch("conftest.py", FORGED_CONFTEST)
    for patch in (rewritten, forged):
        evaluation = domain.evaluate(task, patch, bwrap)
        assert not evaluation.passed, evaluation.feedback
        assert "were put back before the tests ran" in evaluation.feedback
    # a real fix still counts when it comes with changed tests: only the tests are put back
    both = domain.evaluate(task, task.reference + forged, bwrap)
    assert both.passed and both.details["restored"] == ["conftest.py"], both.feedback


def test_evaluation_runs_without_network(domain, bwrap):
    """The fix plus an import that fails when it can reach a server on the host: resolved only because
    the evaluation sandbox has no network, and the server sees no connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    probe = (
        f"\nimport socket as _socket\n\ntry:\n    _socket.create_connection(('127.0.0.1', {port}), 2)\n"
        "except OSError:\n    pass\nelse:\n    raise RuntimeError('network reached')\n"
    )
    task = domain.tasks()[0]
    path = "tinycalc/__init__.py"
    patch = file_patch(path, base_file(domain, task, path), SOURCES[path] + probe)
    evaluation = domain.evaluate(task, patch, bwrap)
    with pytest.raises(TimeoutError):
        server.accept()
    server.close()
    assert evaluation.passed, evaluation.feedback


def test_workspace_is_a_one_commit_git_repository_and_its_diff_is_a_submission(domain, bwrap):
    task = domain.tasks()[0]
    with fresh_session(bwrap, domain.agent_spec()) as session:
        domain.prepare(task, session)
        session.put(".recreate_tools/calc/main.py", "print(1)\n")  # where a scaffold's tools go
        log = session.run("git log --oneline | wc -l && git status --porcelain", timeout=30)
        assert log.ok and log.stdout.split() == ["1"], log
        session.put("fix.diff", task.reference)
        applied = session.run("git apply fix.diff && rm fix.diff && git diff", timeout=30)
        assert applied.ok, applied
        tests = session.run("python -m pytest -q -p no:cacheprovider 2>&1 | tail -1", timeout=120)
        assert " passed" in tests.stdout and "failed" not in tests.stdout, tests
    assert domain.evaluate(task, applied.stdout, bwrap).passed


def test_fixed_splits_and_hidden_tests(domain):
    tasks = domain.tasks()
    by_split = {s: [t.id for t in domain.tasks(s)] for s in ("train", "val", "test")}
    assert sorted(sum(by_split.values(), [])) == sorted(t.id for t in tasks)
    for task in tasks:
        assert task.id in by_split[task.metadata["split"]]
        assert "FAIL_TO_PASS" not in json.dumps(task.metadata) and task.files == {}


def test_missing_environment_is_a_clear_zero(tiny_dataset, bwrap, monkeypatch, tmp_path):
    monkeypatch.setenv("RECREATE_REPO_ENVS", str(tmp_path / "nothing"))
    domain = get_domain("repo", data=tiny_dataset[0])
    task = domain.tasks()[0]
    evaluation = domain.evaluate(task, task.reference, bwrap)
    assert not evaluation.passed and "recreate domain setup repo --data" in evaluation.feedback


FAILING = "astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]"


def test_swebench_rows_load_as_they_are(tmp_path):
    row = {
        "instance_id": "astropy__astropy-12907",
        "repo": "astropy/astropy",
        "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
        "problem_statement": "Modeling's separability_matrix does not compute separability correctly",
        "patch": "diff --git a/x b/x\n",
        "test_patch": "diff --git a/y b/y\n",
        "FAIL_TO_PASS": json.dumps([FAILING]),
        "PASS_TO_PASS": '["astropy/modeling/tests/test_separable.py::test_coord_matrix"]',
        "version": "4.3",
        "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
    }
    data = tmp_path / "swebench.jsonl"
    data.write_text(json.dumps(row) + "\n")
    domain = get_domain("repo", data=data)
    instance = domain.instance(domain.tasks()[0])
    assert instance.fail_to_pass == (
        "astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]",
    )
    assert instance.environment.image == swebench_image(row["instance_id"])
    assert instance.environment.image == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    assert instance.test_files() == ["astropy/modeling/tests/test_separable.py"]


def test_bad_rows_name_the_file_line_and_fix(tmp_path):
    data = tmp_path / "bad.jsonl"
    row = {"instance_id": "a", "repo": "r", "problem_statement": "p", "patch": "x"}
    data.write_text(json.dumps(row) + "\n")
    with pytest.raises(DomainDataError, match=r"bad.jsonl:1: lacks FAIL_TO_PASS"):
        get_domain("repo", data=data)
    row |= {"FAIL_TO_PASS": [], "snapshot": "nope.bundle", "base_commit": "0"}
    data.write_text(json.dumps(row) + "\n")
    with pytest.raises(DomainDataError, match=r"bad.jsonl:1: snapshot .*nope.bundle does not exist"):
        get_domain("repo", data=data)


def test_a_patch_without_a_b_prefixes_or_with_surrogates_fails_saying_why(domain, bwrap):
    task = domain.tasks()[0]
    bare = re.sub(r"^(---|\+\+\+) [ab]/", r"\1 ", task.reference, flags=re.MULTILINE)
    bare = re.sub(r"^diff --git a/(\S+) b/(\S+)", r"diff --git \1 \2", bare, flags=re.MULTILINE)
    unapplied = domain.evaluate(task, bare, bwrap)
    assert not unapplied.passed and "lack git's a/ and b/ prefixes" in unapplied.feedback, unapplied.feedback
    broken = domain.evaluate(task, task.reference + "+# \udcff\n", bwrap)
    assert not broken.passed and "unpaired surrogates" in broken.feedback
