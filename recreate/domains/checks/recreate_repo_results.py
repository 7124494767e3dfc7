"""pytest plugin loaded by repo_check.py (`-p recreate_repo_results`): each test's outcome as data.

Writes {"tests": {nodeid: passed|failed|skipped}, "messages": {nodeid: short reason},
"collect_errors": [...], "covered": [[file, first line], ...]} to $RECREATE_REPO_RESULTS when the
session ends. With RECREATE_REPO_TRACE=1 it also records the functions of the repository that the
tests call (the task builder mutates only those).
"""

import json
import os
import sys

import pytest

_RESULTS = {"tests": {}, "messages": {}, "collect_errors": []}
_COVERED = set()
_ROOT = os.path.realpath(os.environ.get("RECREATE_REPO_ROOT", os.getcwd())) + os.sep
_RANK = {"passed": 0, "skipped": 1, "failed": 2}


def _message(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    return text.strip()[:500]


def pytest_runtest_logreport(report):
    outcome = report.outcome  # passed | failed | skipped; a failed setup or teardown fails the test
    if report.when != "call" and outcome == "passed":
        return
    tests = _RESULTS["tests"]
    previous = tests.get(report.nodeid)
    if previous is None or _RANK[outcome] > _RANK[previous]:
        tests[report.nodeid] = outcome
        if outcome == "failed":
            _RESULTS["messages"][report.nodeid] = _message(report)


def pytest_collectreport(report):
    if report.failed:
        _RESULTS["collect_errors"].append(f"{report.nodeid}: {_message(report)}")


def _profile(frame, event, arg):
    if event == "call":
        filename = frame.f_code.co_filename
        if filename.startswith(_ROOT):
            _COVERED.add((filename[len(_ROOT) :], frame.f_code.co_firstlineno))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    tracing = os.environ.get("RECREATE_REPO_TRACE") == "1"
    if tracing:
        sys.setprofile(_profile)
    try:
        yield
    finally:
        if tracing:
            sys.setprofile(None)


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("RECREATE_REPO_RESULTS")
    if not path:
        return
    _RESULTS["covered"] = sorted(_COVERED)
    with open(path + ".tmp", "w") as handle:
        json.dump(_RESULTS, handle)
    os.replace(path + ".tmp", path)
