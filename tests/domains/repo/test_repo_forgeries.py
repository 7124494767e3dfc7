"""Wrong patches that attack the judge instead of fixing the code, on the shipped examples/repo instances:
each is refused by the patch check with a reason, and each still fails when that check is bypassed
(the judge's own defences: safe sys.path, results over a nonce-signed pipe, restored configuration,
os._exit before atexit, a runtime check of pytest's functions and plugins)."""

from __future__ import annotations

import pytest

from recreate.domains import get_domain
from recreate.domains.repo.evaluation import clean_patch, run_tests, verdict
from recreate.domains.repo.forgeries import REPORT_PATCH, appended_patch, forgeries, new_file_patch
from recreate.domains.repo.guard import refusal
from recreate.domains.repo.snapshot import base_tree
from tests.domains.repo.helpers import EXAMPLES

pytestmark = pytest.mark.bwrap
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.jsonl"))
REGISTERS_A_PLUGIN = """

import gc as _gc

import pytest as _pytest


class _Forge:
    @_pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        outcome.get_result().outcome = "passed"


for _o in _gc.get_objects():
    if type(_o).__name__ == "PytestPluginManager":
        _o.register(_Forge())
"""
FORGE_PLUGIN = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


def tree_of(domain, task) -> bytes:
    instance = domain.instance(task)
    return base_tree(instance.snapshot, instance.base_commit)


@pytest.fixture(scope="module")
def parse_domain(repo_envs):
    return get_domain("repo", data=EXAMPLES / "parse-1.22.4.jsonl")


def bypassing_the_check(domain, task, patch, bwrap):
    """Judge `patch` as evaluate() does, without repo_guard's refusal: what the sandbox alone decides."""
    instance = domain.instance(task)
    run = run_tests(
        bwrap, instance, domain.env_for(instance), tree_of(domain, task), clean_patch(patch), timeout=120
    )
    return verdict(instance, run, 120)


@pytest.mark.parametrize("data", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_the_reported_forgeries_are_refused_with_a_reason(data, repo_envs, bwrap):
    domain = get_domain("repo", data=data)
    for task in domain.tasks()[:3]:
        patches = forgeries(task.reference, tree_of(domain, task))
        assert len(patches) == 5
        for name, patch in patches.items():
            evaluation = domain.evaluate(task, patch, bwrap)
            assert not evaluation.passed and evaluation.feedback.startswith("refused: "), (name, evaluation)


def test_the_gold_patches_pass_the_check(repo_envs):
    domain = get_domain("repo", data=EXAMPLES)
    for task in domain.tasks():
        instance = domain.instance(task)
        assert refusal(task.reference, tree_of(domain, task), instance.environment.pythonpath) is None


def test_the_reported_forgeries_fail_even_past_the_check(parse_domain, bwrap):
    task = parse_domain.tasks()[0]
    for name, patch in forgeries(task.reference, tree_of(parse_domain, task)).items():
        evaluation = bypassing_the_check(parse_domain, task, patch, bwrap)
        assert not evaluation.passed, (name, evaluation.feedback)
    patched = appended_patch(task.reference, tree_of(parse_domain, task), REPORT_PATCH)
    both = bypassing_the_check(parse_domain, task, task.reference + patched, bwrap)
    assert not both.passed and "TestReport.__init__" in both.feedback, both.feedback


def library_code(domain, task, code: str) -> str:
    return appended_patch(task.reference, tree_of(domain, task), code)


FURTHER = {
    "a .pytest.ini whose addopts load a forging plugin": lambda d, t: (
        new_file_patch(".pytest.ini", "[pytest]\naddopts = -p forge_plugin\n")
        + new_file_patch("forge_plugin.py", FORGE_PLUGIN)
    ),
    "a pyproject.toml that disables plugins and loads a forging one": lambda d, t: (
        new_file_patch(
            "pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-p forge_plugin -p no:python"\n'
        )
        + new_file_patch("forge_plugin.py", FORGE_PLUGIN)
    ),
    "a sitecustomize.py that forges reports": lambda d, t: new_file_patch("sitecustomize.py", REPORT_PATCH),
    "a .pth file that runs code at startup": lambda d, t: (
        new_file_patch("forge.pth", "import forge_plugin\n") + new_file_patch("forge_plugin.py", REPORT_PATCH)
    ),
    "packaging metadata that registers a pytest plugin": lambda d, t: (
        new_file_patch("forge-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: forge\nVersion: 1.0\n")
        + new_file_patch("forge-1.0.dist-info/entry_points.txt", "[pytest11]\nforge = forge_plugin\n")
        + new_file_patch("forge_plugin.py", FORGE_PLUGIN)
    ),
    "os._exit when the library is imported": lambda d, t: library_code(d, t, "\nimport os\n\nos._exit(0)\n"),
    "a passing test log printed for a log-parsing judge": lambda d, t: library_code(
        d, t, "\nfor _name in ('test_a', 'test_b'):\n    print(f'tests/test_parse.py::{_name} PASSED')\n"
    ),
    "a report written onto every open descriptor": lambda d, t: library_code(
        d,
        t,
        "\nimport json as _json\nimport os as _os\n\nfor _fd in range(3, 40):\n    try:\n"
        "        _os.write(_fd, _json.dumps({'tests': {}}).encode())\n    except OSError:\n        pass\n",
    ),
    "a plugin registered by library code": lambda d, t: library_code(d, t, REGISTERS_A_PLUGIN),
}


@pytest.mark.parametrize("name", sorted(FURTHER))
def test_further_forgeries_do_not_resolve(name, parse_domain, bwrap):
    task = parse_domain.tasks()[0]
    patch = FURTHER[name](parse_domain, task)
    evaluation = parse_domain.evaluate(task, patch, bwrap)
    assert not evaluation.passed, evaluation.feedback
    if "log" not in name and "descriptor" not in name:
        assert evaluation.feedback.startswith("refused: "), evaluation.feedback
    past = bypassing_the_check(parse_domain, task, patch, bwrap)
    assert not past.passed, past.feedback


def test_a_write_on_the_results_channel_is_named(parse_domain, bwrap):
    task = parse_domain.tasks()[0]
    patch = task.reference + FURTHER["a report written onto every open descriptor"](parse_domain, task)
    evaluation = parse_domain.evaluate(task, patch, bwrap)
    assert not evaluation.passed and "the judge did not write" in evaluation.feedback, evaluation.feedback


def test_the_fix_with_a_harmless_library_change_still_resolves(parse_domain, bwrap):
    """The checks refuse reaching for the judge, not ordinary code: a helper using json and os passes."""
    task = parse_domain.tasks()[0]
    helper = "\n\ndef _dump(value):\n    import json\n    import os\n\n    return json.dumps(value), os.sep\n"
    evaluation = parse_domain.evaluate(task, task.reference + library_code(parse_domain, task, helper), bwrap)
    assert evaluation.passed, evaluation.feedback
