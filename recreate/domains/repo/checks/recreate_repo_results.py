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
patch them, so the parent refuses a report that names any. This file's own module and the json
modules it reports with are watched too (every attribute): what the runner does after the run is done
with functions it took before any tested code ran. The report carries "exit", the status the runner
then leaves with; a runner that finds anything changed, or its results pipe replaced, leaves with
TAMPERED_EXIT instead, so a report forged in process (with a forged json, or written before killing
the process) never matches how the process ended. With "trace" it also records the functions of the
repository that the tests call (the task builder mutates only those).
"""

import ast
import json
import os
import sys
import types

import pytest  # this file's folder holds nothing else, and no folder of the repository is on the path yet

_RANK = {"passed": 0, "skipped": 1, "failed": 2}
_WATCHED = ("_pytest", "pluggy", "pytest", "unittest", "doctest")  # their functions and classes
_TESTING = ("testing", "_testing")  # a module named so (numpy.testing...): its asserts are watched too
_KEPT = ("json",)  # what the report is written with: every attribute
TAMPERED_EXIT = 99  # not one of pytest's exit codes (0-5)
_MISSING = object()


def _message(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    return text.strip()[:500]


def _watched_modules():
    """(name, module, every attribute?) for pytest, pluggy, json and this file's own module."""
    modules = [(__name__, sys.modules[__name__], True)]
    for name, module in list(sys.modules.items()):
        parts = name.split(".")
        watched = parts[0] in _WATCHED + _KEPT or any(part in _TESTING for part in parts)
        if isinstance(module, types.ModuleType) and watched:
            modules.append((name, module, parts[0] in _KEPT))
    return modules


def _framework_state(modules, vars=vars, list=list, isinstance=isinstance, kinds=(type, types.FunctionType)):
    """(module, name) -> object for the functions and classes of `modules` (every attribute of those
    marked so), and the attributes of their classes: what code patching them in process would change.
    Builtins are bound as defaults: a global of this module shadowing one cannot blind the check."""
    state = {}
    for name, module, every in modules:
        for attribute, value in list(vars(module).items()):
            if every or isinstance(value, kinds):
                state[(name, attribute)] = value
            if isinstance(value, type) and value.__module__ == name:
                for member, inner in list(vars(value).items()):
                    state[(name, attribute + "." + member)] = inner
    return state


def _changes(before, now, every, sorted=sorted, isinstance=isinstance, module=types.ModuleType):
    """The names whose object changed, and the attributes added to the modules watched whole (but
    submodules: importing json.tool adds `tool` to json)."""
    changed = [".".join(key) for key, value in before.items() if now.get(key, _MISSING) is not value]
    for key, value in now.items():
        if key not in before and key[0] in every and not isinstance(value, module):
            changed.append(".".join(key))
    return sorted(changed)


class Results:
    def __init__(self, root, trace):
        self.tests, self.messages, self.collect_errors = {}, {}, []
        self.covered = set()
        self.root = os.path.realpath(root) + os.sep
        self.trace = trace
        self.modules = _watched_modules()
        self.every = {name for name, _, every in self.modules if every}
        self.state_of, self.changes = _framework_state, _changes  # the originals, kept on the object
        self.framework = _framework_state(self.modules)
        self.plugins = None
        self.pluginmanager = None
        self.loaded_from_repo = []  # plugins the repository's packaging metadata made pytest load
        self.fields = self._fields()  # what the outcomes are kept in: replacing them forges the report

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

    def _fields(self):
        return [(id(value), type(value)) for value in (self.tests, self.messages, self.collect_errors)]

    def tampered(self):
        changed = self.changes(self.framework, self.state_of(self.modules), self.every)
        changed += self.loaded_from_repo
        if self._fields() != self.fields:
            changed.append("the runner's record of the outcomes was replaced")
        changed += _replaced_in_test_modules(self.root)
        if self.pluginmanager is not None and self.plugins is not None:
            for plugin in self.pluginmanager.get_plugins():
                if id(plugin) not in self.plugins and not _legitimate_plugin(plugin):
                    changed.append("plugin registered during the run: " + repr(plugin)[:100])
        return changed

    def report(self, tampered, exit_code):
        return {
            "tests": self.tests,
            "messages": self.messages,
            "collect_errors": self.collect_errors,
            "covered": sorted(self.covered),
            "tampered": tampered,
            "exit": exit_code,
        }


def _replaced_in_test_modules(root, modules=sys.modules, realpath=os.path.realpath, vars=vars, list=list):
    """Functions and classes the test files define (tests, their helpers, conftest.py: the judge puts
    those files back) that now hold one made in a library file of the repository: patched library code
    reached into the tests (e.g. replaced an assertion helper). What this calls is bound at import,
    before any tested code runs."""
    found = []
    for name, module in list(modules.items()):
        path = realpath(getattr(module, "__file__", None) or "")
        if not path.startswith(root) or not path.endswith(".py") or not _is_test_file(path[len(root) :]):
            continue
        namespace = vars(module)
        for attribute in _defined_names(path):
            origin = _origin(namespace.get(attribute))
            if origin and origin.startswith(root) and not _is_test_file(origin[len(root) :]):
                found.append(f"{name}.{attribute} replaced by code of {origin[len(root) :]}")
    return found


def _defined_names(path, parse=ast.parse, kinds=(ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
    """The names a module's file binds with a top-level def or class (the file as the judge put it back)."""
    try:
        with open(path, "rb") as handle:
            tree = parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return []
    return [node.name for node in tree.body if isinstance(node, kinds)]


def _origin(value, realpath=os.path.realpath, modules=sys.modules, function=types.FunctionType):
    """The file a function (unwrapped) or class was made in, or None."""
    while isinstance(getattr(value, "__wrapped__", None), function):
        value = value.__wrapped__
    if isinstance(value, function):
        return realpath(value.__code__.co_filename)
    if isinstance(value, type):
        return realpath(getattr(modules.get(value.__module__), "__file__", None) or "") or None
    return None


def _is_test_file(relative):
    """As the judge reads it (guard.TEST_FILE, TEST_DIRS): a file it puts back before the run."""
    parts = relative.replace(os.sep, "/").split("/")
    name = parts[-1]
    if name == "conftest.py" or name.startswith("test_") or name.endswith("_test.py"):
        return True
    return any(part in ("tests", "test", "testing") for part in parts[:-1])


def _legitimate_plugin(plugin):
    """pytest's own objects and the conftest.py modules it loads (those are restored before the run)."""
    if isinstance(plugin, types.ModuleType):
        return os.path.basename(getattr(plugin, "__file__", "") or "") == "conftest.py"
    module = type(plugin).__module__ or ""
    return module.split(".")[0] in _WATCHED


def _write_all(write, fd, data):
    while data:
        data = data[write(fd, data) :]


def _pipe_identity(fstat, fd):
    try:
        stat = fstat(fd)
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino)


def main():
    # taken before any tested code runs (it runs in this process and may replace what these name)
    write, fstat, leave, dumps = os.write, os.fstat, os._exit, json.dumps
    job_fd, results_fd = int(sys.argv[1]), int(sys.argv[2])
    with os.fdopen(job_fd) as handle:
        job = json.load(handle)
    os.set_inheritable(results_fd, False)
    pipe = _pipe_identity(fstat, results_fd)
    del sys.path[0]  # this file's folder
    stdlib_end = next(
        (i for i, p in enumerate(sys.path) if os.path.basename(p) in ("site-packages", "dist-packages")),
        len(sys.path),
    )
    sys.path[stdlib_end:stdlib_end] = job["paths"]
    sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"), *job["args"]]
    results = Results(job["root"], job.get("trace", False))
    tampered, report = results.tampered, results.report
    code = pytest.main(job["args"], plugins=[results])
    changed = tampered()
    if _pipe_identity(fstat, results_fd) != pipe:
        changed.append("the results pipe was closed or replaced")
    exit_code = TAMPERED_EXIT if changed else int(code)
    _write_all(write, results_fd, (job["nonce"] + "\n" + dumps(report(changed, exit_code))).encode())
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        leave(exit_code)


if __name__ == "__main__":
    main()
