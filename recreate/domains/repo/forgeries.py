"""Wrong patches that forge a "resolved" by attacking the judge instead of fixing the code: the selftest
submits them to every instance (none may resolve it) and the tests use them to show each defence holds
even when the patch check (guard.py) is bypassed."""

from __future__ import annotations

import difflib
import io
import re
import tarfile

# a root module named like the judge's old results plugin, writing every collected test as passed
PLUGIN_SHADOW = """import json
import os


def pytest_sessionfinish(session):
    path = os.environ.get("RECREATE_REPO_RESULTS")
    if path:
        with open(path, "w") as out:
            json.dump({"tests": {i.nodeid: "passed" for i in session.items}, "messages": {}}, out)
"""
# a root module shadowing a standard-library module pytest imports; at exit it rewrites the results
STDLIB_SHADOW = """import atexit
import importlib.util
import json
import os
import sysconfig

_path = os.path.join(sysconfig.get_paths()["stdlib"], __name__ + ".py")
_spec = importlib.util.spec_from_file_location(__name__, _path)
_real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_real)
globals().update({k: v for k, v in vars(_real).items() if not k.startswith("__")})


def _forge():
    path = os.environ.get("RECREATE_REPO_RESULTS")
    if path and os.path.exists(path):
        with open(path) as handle:
            data = json.load(handle)
        data["tests"] = {name: "passed" for name in data["tests"]}
        with open(path, "w") as handle:
            json.dump(data, handle)


atexit.register(_forge)
"""
# library code that makes every report of pytest say "passed"
REPORT_PATCH = """

import _pytest.reports as _reports

_init = _reports.TestReport.__init__


def _always_passed(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.outcome = "passed"
    self.longrepr = None


_reports.TestReport.__init__ = _always_passed
"""

# library code that switches off unittest's assertions (suites of unittest.TestCase classes then pass)
UNITTEST_OFF = """

import unittest as _unittest

for _name in dir(_unittest.TestCase):
    if _name.startswith(("assert", "fail")):
        setattr(_unittest.TestCase, _name, lambda *args, **kwargs: None)
"""
# library code that finds the runner's record of outcomes through gc and swaps in one that says "passed"
RECORD_SWAP = """

import gc as _gc


class _AllPassed(dict):
    def __setitem__(self, key, value):
        super().__setitem__(key, "passed")


for _found in _gc.get_objects():
    if hasattr(_found, "tests") and hasattr(_found, "collect_errors"):
        _found.tests = _AllPassed(_found.tests)
"""


def new_file_patch(path: str, content: str) -> str:
    lines = content.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


def file_patch(path: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def appended_patch(gold: str, tree: bytes, code: str) -> str:
    """`code` appended to the first file the gold patch changes (library code the tests import)."""
    found = re.search(r"^\+\+\+ b/(\S+)", gold, re.MULTILINE)
    if found is None:
        return ""
    path = found.group(1)
    with tarfile.open(fileobj=io.BytesIO(tree)) as tar:
        member = tar.extractfile(path)
        old = member.read().decode() if member else ""
    return file_patch(path, old, old + code)


def forgeries(gold: str, tree: bytes | None) -> dict[str, str]:
    """name -> patch, for an instance whose base tree is `tree`."""
    out = {
        "a root module named like the judge's plugin": new_file_patch(
            "recreate_repo_results.py", PLUGIN_SHADOW
        ),
        "a root module shadowing the standard library": new_file_patch("shlex.py", STDLIB_SHADOW),
    }
    if tree is not None:
        library = {
            "library code that makes every pytest report pass": REPORT_PATCH,
            "library code that switches off unittest's assertions": UNITTEST_OFF,
            "library code that swaps the runner's record through gc": RECORD_SWAP,
        }
        out |= {name: appended_patch(gold, tree, code) for name, code in library.items()}
    return {name: patch for name, patch in out.items() if patch}
