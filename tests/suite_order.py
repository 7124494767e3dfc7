"""How a parallel run (`RECREATE_TEST_WORKERS=N bash scripts/test.sh`, pytest-xdist) hands out the
tests: whole files per worker, the files sharing a costly session fixture as one unit (FILE_GROUPS, so
the suite makes each fixture once), and the longest units first. A few units take many minutes on 2
cores; handed out last, one of them alone set the suite's end (xdist orders units by their number of
tests). The end of every run prints the units' own times, to keep EXPECTED_S true.

tests/conftest.py imports these hooks; tests/test_suite_groups.py checks the tables against the suite.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest

# Session fixtures that cost minutes or gigabytes, and the files that use them.
SHARED_FIXTURES = {"main_job_run": "main-job", "vllm_python": "vllm", "docker_host": "docker"}
FILE_GROUPS = {
    "tests/finetune/test_evolve_step.py": "main-job",
    "tests/ui/test_real_home.py": "main-job",
    "tests/local/test_vllm.py": "vllm",
    "tests/tapo_backend/test_serve.py": "vllm",
    "tests/sandbox/test_docker.py": "docker",
    "tests/sandbox/test_hostile.py": "docker",
    "tests/domains/repo/test_repo_docker.py": "docker",
}
# Seconds the longest units took in a full parallel run on 2 cores (fresh-clone CI, stop 42); the rest are
# handed out after them, the most tests first.
EXPECTED_S = {
    "tests/finetune/test_closed_loop_smoke.py": 860,
    "vllm": 590,
    "tests/optimizer/test_evolve_cli.py": 200,
    "main-job": 180,
    "docker": 110,
}
SHOWN = 15  # units in the end-of-run table


def unit_of(nodeid: str) -> str:
    """The unit a test belongs to: its file, or its file's group."""
    file = nodeid.split("::")[0]
    return FILE_GROUPS.get(file, file)


def longest_first(nodeids: list[str]) -> list[str]:
    """The units of these tests, the longest expected first, then by their number of tests."""
    counts = collections.Counter(unit_of(nodeid) for nodeid in nodeids)
    return sorted(counts, key=lambda unit: (-EXPECTED_S.get(unit, 0), -counts[unit], unit))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {unit: i for i, unit in enumerate(longest_first([item.nodeid for item in items]))}
    items.sort(key=lambda item: rank[unit_of(item.nodeid)])  # stable: a file's own order stays


@pytest.hookimpl(optionalhook=True)  # xdist may be absent (`-p no:xdist`)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Units in the order collected (above). (xdist's `--dist loadgroup` reads marks through the test
    ids, which pytest 9 no longer lets a plugin change, so the grouping is done here.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False
    return ByUnit(config, log)


_unit_seconds: collections.Counter[str] = collections.Counter()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _unit_seconds[unit_of(report.nodeid)] += report.duration  # setup, call and teardown


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _unit_seconds:
        return
    terminalreporter.write_sep("=", f"the {SHOWN} longest units (one worker each; EXPECTED_S)")
    for unit, seconds in _unit_seconds.most_common(SHOWN):
        terminalreporter.write_line(f"{seconds:8.1f}s {unit}")
