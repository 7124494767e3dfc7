"""Runs pytest for repo_check.py and sends each test's outcome back as data (standard library + pytest).

Started as `python -s -B THIS_FILE JOB_FD RESULTS_FD` (not `-m pytest`, so the repository is not the
first folder on sys.path): reads its job ({"nonce", "paths", "args", "root", "trace"}) from JOB_FD,
imports pytest from the environment before any folder of the repository is on sys.path, then puts the
repository's folders after the standard library (a module of the repository cannot shadow one of it),
registers the collector below as an object (no module name a repository or its configuration could
shadow or disable with `-p no:...`), runs pytest and writes "<nonce>\\n{json}" to RESULTS_FD, an
inherited pipe the parent reads. Then it leaves with os._exit: no atexit hook of the tested code runs
after the report.

The report is {"tests": {nodeid: passed|failed|skipped}, "messages": {nodeid: short reason},
"collect_errors": [...], "covered": [[file, first line], ...], "tampered": [...]}. "tampered" names
the parts of pytest and pluggy (functions, classes, their methods) that changed while the tests ran,
plugins registered during the run by something other than pytest or a conftest.py, and plugins pytest
loaded from packaging metadata inside the repository: the tested code runs in this process and could
patch them, so the parent refuses a report that names any. With "trace" it also
records the functions of the repository that the tests call (the task builder mutates only those).
"""

import json
import os
import sys
import types

import pytest  # this file's folder holds nothing else, and no folder of the repository is on the path yet

_RANK = {"passed": 0, "skipped": 1, "failed": 2}
_WATCHED = ("_pytest", "pluggy", "pytest")


def _message(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    return text.strip()[:500]


def _framework_state():
    """(module, name) -> object for the functions and classes of pytest and pluggy, and the
    attributes of those classes: what code patching the framework in process would change."""
    state = {}
    for name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or name.split(".")[0] not in _WATCHED:
            continue
        for attribute, value in list(vars(module).items()):
            if isinstance(value, (type, types.FunctionType)):
                state[(name, attribute)] = value
            if isinstance(value, type) and value.__module__ == name:
                for member, inner in list(vars(value).items()):
                    state[(name, f"{attribute}.{member}")] = inner
    return state


class Results:
    def __init__(self, root, trace):
        self.tests, self.messages, self.collect_errors = {}, {}, []
        self.covered = set()
        self.root = os.path.realpath(root) + os.sep
        self.trace = trace
        self.framework = _framework_state()
        self.plugins = None
        self.pluginmanager = None
        self.loaded_from_repo = []  # plugins the repository's packaging metadata made pytest load

    def pytest_configure(self, config):
        self.pluginmanager = config.pluginmanager

    def pytest_sessionstart(self, session):
        self.plugins = {id(p) for p in self.pluginmanager.get_plugins()}
        for plugin, dist in self.pluginmanager.list_plugin_distinfo():
            location = str(getattr(dist, "_path", ""))
            if location and os.path.realpath(location).startswith(self.root):
                self.loaded_from_repo.append(f"plugin {getattr(plugin, '__name__', plugin)!r} of {location}")

    def pytest_runtest_logreport(self, report):
        outcome = report.outcome  # passed | failed | skipped; a failed setup or teardown fails the test
        if report.when != "call" and outcome == "passed":
            return
        previous = self.tests.get(report.nodeid)
        if previous is None or _RANK.get(outcome, 2) > _RANK[previous]:
            self.tests[report.nodeid] = outcome if outcome in _RANK else "failed"
            if outcome != "passed" and outcome != "skipped":
                self.messages[report.nodeid] = _message(report)

    def pytest_collectreport(self, report):
        if report.failed:
            self.collect_errors.append(f"{report.nodeid}: {_message(report)}")

    def _profile(self, frame, event, arg):
        if event == "call":
            filename = frame.f_code.co_filename
            if filename.startswith(self.root):
                self.covered.add((filename[len(self.root) :], frame.f_code.co_firstlineno))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        if self.trace:
            sys.setprofile(self._profile)
        try:
            yield
        finally:
            if self.trace:
                sys.setprofile(None)

    def tampered(self):
        now = _framework_state()
        changed = sorted(".".join(key) for key, value in self.framework.items() if now.get(key) is not value)
        changed += self.loaded_from_repo
        if self.pluginmanager is not None and self.plugins is not None:
            for plugin in self.pluginmanager.get_plugins():
                if id(plugin) not in self.plugins and not _legitimate_plugin(plugin):
                    changed.append("plugin registered during the run: " + repr(plugin)[:100])
        return changed

    def report(self):
        return {
            "tests": self.tests,
            "messages": self.messages,
            "collect_errors": self.collect_errors,
            "covered": sorted(self.covered),
            "tampered": self.tampered(),
        }


def _legitimate_plugin(plugin):
    """pytest's own objects and the conftest.py modules it loads (those are restored before the run)."""
    if isinstance(plugin, types.ModuleType):
        return os.path.basename(getattr(plugin, "__file__", "") or "") == "conftest.py"
    module = type(plugin).__module__ or ""
    return module.split(".")[0] in _WATCHED


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data) :]


def main():
    job_fd, results_fd = int(sys.argv[1]), int(sys.argv[2])
    with os.fdopen(job_fd) as handle:
        job = json.load(handle)
    os.set_inheritable(results_fd, False)
    del sys.path[0]  # this file's folder
    stdlib_end = next(
        (i for i, p in enumerate(sys.path) if os.path.basename(p) in ("site-packages", "dist-packages")),
        len(sys.path),
    )
    sys.path[stdlib_end:stdlib_end] = job["paths"]
    sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"), *job["args"]]
    results = Results(job["root"], job.get("trace", False))
    code = pytest.main(job["args"], plugins=[results])
    _write_all(results_fd, (job["nonce"] + "\n" + json.dumps(results.report())).encode())
    os.close(results_fd)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))


if __name__ == "__main__":
    main()
