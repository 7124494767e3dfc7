"""The test suite's own layout: every file that uses a costly session fixture is in that fixture's
xdist group (tests/suite_order.py), so a parallel run makes the fixture once."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import REPO
from tests.suite_order import EXPECTED_S, FILE_GROUPS, SHARED_FIXTURES, longest_first, unit_of

WHERE = re.compile(r"^-+ \((?P<file>[^:]+):\d+\) -+$")


def test_every_user_of_a_costly_fixture_is_in_its_group() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--fixtures-per-test", "tests"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    users: dict[str, set[str]] = {}
    file = ""
    for line in listed.stdout.splitlines():
        if where := WHERE.match(line):
            file = where["file"]
        elif " -- " in line and not line.startswith(" "):
            users.setdefault(line.split(" -- ")[0], set()).add(file)
    assert users.get("tmp_path_factory"), "the listing was not read (pytest changed its format?)"
    wrong = [
        f"{file} uses {name}: add it to FILE_GROUPS as {group!r}"
        for name, group in SHARED_FIXTURES.items()
        for file in sorted(users.get(name, ()))
        if FILE_GROUPS.get(file) != group
    ]
    assert not wrong, wrong


def test_every_expected_unit_is_a_file_or_group_of_the_suite() -> None:
    groups = set(FILE_GROUPS.values())
    stale = [unit for unit in EXPECTED_S if unit not in groups and not (REPO / unit).is_file()]
    assert not stale, f"EXPECTED_S names units the suite no longer has: {stale}"
    assert all(file.startswith("tests/") and (REPO / file).is_file() for file in FILE_GROUPS)


def test_the_longest_units_go_first_then_the_most_tests() -> None:
    ids = [
        "tests/a/test_small.py::t1",
        "tests/a/test_many.py::t1",
        "tests/a/test_many.py::t2",
        "tests/a/test_many.py::t3",
        "tests/local/test_vllm.py::t1",
        "tests/tapo_backend/test_serve.py::t1",
        "tests/finetune/test_closed_loop_smoke.py::t1",
    ]
    order = longest_first(ids)
    by_time = sorted((u for u in order if u in EXPECTED_S), key=lambda u: -EXPECTED_S[u])
    assert order[: len(by_time)] == by_time and unit_of(ids[4]) == unit_of(ids[5]) == "vllm"
    assert order[len(by_time) :] == ["tests/a/test_many.py", "tests/a/test_small.py"]


def test_a_parallel_run_hands_out_the_longest_unit_first(tmp_path) -> None:
    """Through xdist itself: with the real scheduler, the worker's first unit is the longest."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "conftest.py").write_text(
        "import tests.suite_order as order\n"
        "order.EXPECTED_S = {'tests/test_b.py': 5}\n"
        "from tests.suite_order import pytest_collection_modifyitems, pytest_xdist_make_scheduler\n"
    )
    (tmp_path / "tests" / "test_a.py").write_text("def test_a1(): pass\ndef test_a2(): pass\n")
    (tmp_path / "tests" / "test_b.py").write_text("def test_b(): pass\n")
    argv = [sys.executable, "-m", "pytest", "-n", "1", "--dist", "loadscope", "-v", "-p", "no:cacheprovider"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ran = subprocess.run([*argv, "tests"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    passed = [line.split()[-1] for line in ran.stdout.splitlines() if " PASSED " in line]
    assert [name.split("::")[-1] for name in passed] == ["test_b", "test_a1", "test_a2"], ran.stdout
