"""Runs INSIDE the DS-1000 checker sandbox, which no solution ever runs in: judge solutions from data.

A long-lived server: it imports the libraries the problems use once (`config.json`), then forks one
child per job that the host drops into `jobs/` (`jobs/<id>/problem.json`, then `jobs/<id>.job`).
The child runs the problem's own `test_execution` twice, with `exec` replaced:
1. recording: each test case's code (the solution inserted) and input namespace go to `cases.pkl`,
   the expected answers stay in this process; the host runs them in the solution's own sandbox;
2. judging: the solution's results (`results.json` + `results.npz`, decoded by ds1000_data, which runs
   no code) are handed to the problem's checks as if `exec` had produced them, figures rebuilt by
   ds1000_figure. Before a test case's own check, a result with no elements (a size-0 array, an empty
   list or frame...) where the expected answer has some fails: numpy's comparisons broadcast a size-0
   array against anything and a `zip` over it checks nothing; so does a masked array with elements
   masked where the expected answer has none (numpy's testing asserts skip masked elements). A figure
   past `check_figure_budget`'s bounds fails its case before it is rebuilt, and so does an output.png
   of more than MAX_PIXELS pixels when the check opens it. The verdict is written to `verdict.json`
   and only read by the host.
"""

import contextlib
import json
import math
import os
import pickle
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Sized
from numbers import Number
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
import ds1000_data  # noqa: E402
import ds1000_figure  # noqa: E402

CONTEXT_FILE = "<ds1000 test context>"
IDLE_POLL_S, BUSY_POLL_S = 0.05, 0.005
KILL_AFTER_S = 10  # past a job's timeout, the server kills its whole process group


MAX_TICKS = 1000  # per axis and kind (matplotlib's own Locator.MAXTICKS); each tick is a few artists
MAX_ALL_TICKS = 8000  # in the figure
MAX_NODES = 1_000_000  # lists, dicts and values in a summary
MAX_CELLS = 12_000_000  # array elements in a summary (an image may hold 4M cells)
MAX_CHARS = 2_000_000  # of text in a summary
MAX_PIXELS = 1 << 25  # of the figure at its dpi (a check that draws it allocates them), of output.png


def check_figure_budget(summary):
    """ValueError for a figure summary (ds1000_figure) too large to rebuild and check in seconds; real
    figures are far below these bounds. The solution controls the summary: it runs in its process."""
    import numpy as np

    nodes, cells, chars, ticks, stack = 0, 0, 0, [], [summary]
    while stack:
        value = stack.pop()
        nodes += 1
        if isinstance(value, dict):
            if "locs" in value and "labels" in value:  # an axis' ticks
                ticks.append(len(value["locs"]) if isinstance(value["locs"], (list, np.ndarray)) else 1 << 60)
            stack.extend([*value, *value.values()])
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
        elif isinstance(value, np.ndarray):
            cells += value.size
        elif isinstance(value, str):
            chars += len(value)
    width, height = summary["size"]
    pixels = float(width) * float(height) * float(summary["dpi"]) ** 2
    if nodes > MAX_NODES or cells > MAX_CELLS or chars > MAX_CHARS or not 0 < pixels <= MAX_PIXELS:
        raise ValueError(f"a figure too large to rebuild ({nodes} nodes, {cells} cells, {chars} chars)")
    if max(ticks, default=0) > MAX_TICKS or sum(ticks) > MAX_ALL_TICKS:
        raise ValueError(f"more ticks than a figure can show ({max(ticks)} on one axis, {sum(ticks)} in all)")


class SolutionRaised(Exception):
    """The solution raised this in its own sandbox (name, message and traceback come as data)."""

    def __init__(self, error):
        super().__init__(error.get("message", ""))
        self.error = error


def _short(value, limit=600):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def _failing_line(exc, code_context):
    lines = code_context.splitlines()
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == CONTEXT_FILE and 0 < frame.lineno <= len(lines):
            return lines[frame.lineno - 1].strip()
    return None


def _context_traceback(exc):
    """The traceback from the test context down: this checker's own frames are noise to the reader."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != CONTEXT_FILE:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))[-1500:]


def _write_json(name, value):
    Path(name + ".tmp").write_text(json.dumps(value))
    os.replace(name + ".tmp", name)


def _wait_for(name, deadline):
    while not Path(name).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {name} from the solution's sandbox in time")
        time.sleep(BUSY_POLL_S)


def size_of(value):
    """How many elements a value holds (1 for a number), or None where that is no question to ask."""
    try:
        shape = getattr(value, "shape", None)
        if type(shape).__name__ == "TensorShape":  # tensorflow's: a tuple once every size is known
            shape = tuple(shape.as_list()) if shape.rank is not None else None
        if isinstance(shape, tuple) and all(isinstance(n, int) for n in shape):
            return math.prod(shape)
        if isinstance(value, Sized):
            return len(value)
    except Exception:  # a property or __len__ that raises: no size to speak of
        return None
    return 1 if isinstance(value, Number) else None


def is_empty_where_expected(result, expected):
    return size_of(result) == 0 and size_of(expected) not in (None, 0)


def is_masked_where_expected(result, expected):
    """`result` masks elements `expected` does not: numpy's testing asserts skip masked elements, so an
    array with every element masked passes `assert_array_equal` (and `assert_allclose`) against anything."""
    numpy = sys.modules.get("numpy")
    if numpy is None or not isinstance(result, numpy.ma.MaskedArray):
        return False
    mask = numpy.ma.getmaskarray(result)
    if not mask.any():
        return False
    allowed = numpy.ma.getmaskarray(expected) if isinstance(expected, numpy.ma.MaskedArray) else False
    try:
        return bool((mask & ~numpy.broadcast_to(allowed, mask.shape)).any())
    except ValueError:  # shapes that do not broadcast: the expected answer masks none of these elements
        return True


def find_where_expected(test, result, expected, where="result"):
    """Where `test(result, expected)` holds for `result` or an item of it (walking lists, tuples and dicts
    shaped like `expected`): None when nowhere."""
    if test(result, expected):
        return where
    if isinstance(result, (list, tuple)) and isinstance(expected, (list, tuple)):
        pairs = enumerate(zip(result, expected, strict=True)) if len(result) == len(expected) else ()
    elif isinstance(result, dict) and isinstance(expected, dict):
        pairs = ((key, (result[key], value)) for key, value in expected.items() if key in result)
    else:
        return None
    for key, (got, want) in pairs:
        found = find_where_expected(test, got, want, f"{where}[{key!r}]")
        if found:
            return found
    return None


def empty_where_expected(result, expected, where="result"):
    """Where `result` (or an item of it) has no elements and `expected` has some: None when nowhere."""
    return find_where_expected(is_empty_where_expected, result, expected, where)


def masked_where_expected(result, expected, where="result"):
    """Where `result` (or an item of it) masks elements `expected` does not: None when nowhere."""
    return find_where_expected(is_masked_where_expected, result, expected, where)


def record(namespace, solution):
    """Run test_execution with the solution's `exec` and the checks stubbed: the generated test cases
    (input, expected) and, per `exec`, the code and its input namespace."""
    generated, cases = [], []
    generate = namespace["generate_test_case"]

    def recording_generate(case_id):
        case = generate(case_id)
        generated.append(case)
        return case

    def recording_exec(code, env):
        cases.append((code, dict(env)))
        env["result"] = None

    checks = namespace.get("exec_test")
    namespace.update(generate_test_case=recording_generate, exec=recording_exec, exec_test=lambda *a: True)
    namespace["test_execution"](solution)
    namespace.update(generate_test_case=generate, exec_test=checks)
    del namespace["exec"]
    return generated, cases


def dump_cases(cases):
    """The cases for the solution's sandbox. A test input of a class the test defines in a function (a
    model built in `define_test_input`) has no importable name: cloudpickle (a joblib dependency of the
    pinned environment) sends such a class by value, with the globals its methods name."""
    try:
        return pickle.dumps(cases)
    except (pickle.PicklingError, AttributeError, TypeError):
        import cloudpickle

        return cloudpickle.dumps(cases)


def judge(namespace, solution, generated, outcomes):
    """Run test_execution again: each test case replayed, each `exec` answered by the solution's data."""
    replay, answers = iter(generated), iter(outcomes)
    expected = []  # the expected answer of the test case generated last, when it is (input, expected)

    def replayed_generate(case_id):
        case = next(replay)
        expected[:] = [case[1]] if isinstance(case, (tuple, list)) and len(case) == 2 else []
        return case

    def served_exec(code, env):
        outcome = next(answers)
        if outcome.get("figure") is not None:
            check_figure_budget(outcome["figure"])
        ds1000_figure.rebuild(outcome.get("figure"))
        Path("output.png").unlink(missing_ok=True)
        if outcome.get("image"):
            Path("output.png").write_bytes(outcome["image"])
        if outcome.get("error"):
            raise SolutionRaised(outcome["error"])
        if outcome.get("figure_error"):
            raise AssertionError(f"the solution's figure could not be read: {outcome['figure_error']}")
        if outcome.get("has_result"):
            env["result"] = outcome.get("result")
            empty = expected and empty_where_expected(env["result"], expected[0])
            if empty:
                raise AssertionError(f"{empty} is empty where the expected answer is not")
            masked = expected and masked_where_expected(env["result"], expected[0])
            if masked:
                raise AssertionError(f"{masked} masks elements the expected answer does not mask")

    generate = namespace["generate_test_case"]
    namespace.update(generate_test_case=replayed_generate, exec=served_exec)
    try:
        namespace["test_execution"](solution)
    finally:
        namespace["generate_test_case"] = generate
        del namespace["exec"]


def verdict_for(exc, stage, code_context, generated, outcomes):
    error = exc.error if isinstance(exc, SolutionRaised) else None
    report = {
        "passed": False,
        "stage": stage,
        "exception": error["exception"] if error else type(exc).__name__,
        "message": (error["message"] if error else str(exc))[:1000],
        "failing_line": _failing_line(exc, code_context),
        "traceback": error["traceback"] if error else _context_traceback(exc),
    }
    if stage == "test_execution" and isinstance(exc, AssertionError) and generated and outcomes:
        first = outcomes[0]
        if generated[0][1] is not None:
            report["expected"] = _short(generated[0][1])
            report["got"] = (
                _short(first.get("result")) if first.get("has_result") else "<no variable named result>"
            )
    return report


def serve_job(deadline):
    """In a forked child, inside jobs/<id>/: record, wait for the solution's data, judge."""
    problem = json.loads(Path("problem.json").read_text())
    code_context, solution = problem["code_context"], problem["solution"]
    os.makedirs("work", exist_ok=True)
    os.chdir("work")
    namespace = {"__name__": "ds1000_test_context"}
    generated, outcomes, stage = [], [], "loading the test context"
    try:
        exec(compile(code_context, CONTEXT_FILE, "exec"), namespace)
        stage = "generating the test cases"
        generated, cases = record(namespace, solution)
        Path("../cases.pkl").write_bytes(dump_cases(cases))
        _write_json("../cases.ready", len(cases))
        stage = "running the solution"
        _wait_for("../results.done", deadline)
        data = ds1000_data.loads(Path("../results.json").read_text(), Path("../results.npz").read_bytes())
        if not isinstance(data, list):
            raise ds1000_data.DecodeError(f"the solution's sandbox sent no results: {str(data)[:300]}")
        outcomes = data
        stage = "test_execution"
        judge(namespace, solution, generated, outcomes)
        if "test_string" in namespace:
            stage = "test_string"
            namespace["test_string"](solution)
    except BaseException as exc:  # anything the checks raise is a failed check, SystemExit included
        _write_json("../verdict.json", verdict_for(exc, stage, code_context, generated, outcomes))
        return
    _write_json("../verdict.json", {"passed": True})


def fork_job(path, timeout):
    job = path.with_suffix("")
    path.unlink()
    pid = os.fork()
    if pid:
        with contextlib.suppress(OSError):  # (the child does it too: whichever runs first)
            os.setpgid(pid, pid)
        return pid
    try:
        os.setpgid(0, 0)  # a group of its own: what the check starts (workers, helpers) dies with it
        signal.alarm(int(timeout) + 5)  # a stuck check dies; the host then scores 0 for lack of a verdict
        os.chdir(job)
        serve_job(time.monotonic() + timeout)
    finally:
        os._exit(0)


def main():
    config = json.loads(Path("config.json").read_text())
    for module in config["modules"]:
        with contextlib.suppress(Exception):  # a problem that needs it fails on its own, with the reason
            __import__(module)
    with contextlib.suppress(ImportError):  # checks open the solution's output.png with Pillow, whose
        from PIL import Image  # own bound (an error past ~179M pixels, ~700 MB decoded) is far too high

        Image.MAX_IMAGE_PIXELS = MAX_PIXELS // 2  # Pillow refuses images of more than twice this
    Path("jobs").mkdir(exist_ok=True)
    Path("server.ready").write_text("ready")
    children = {}  # pid (and process group) -> when to kill the group
    while not Path("stop").exists():
        jobs = sorted(Path("jobs").glob("*.job"))
        for path in jobs:
            timeout = float(config["timeout"])
            children[fork_job(path, timeout)] = time.monotonic() + timeout + KILL_AFTER_S
        for path in Path("jobs").glob("*.done"):  # the host has read that verdict
            shutil.rmtree(path.with_suffix(""), ignore_errors=True)
            path.unlink()
        for pid, kill_at in list(children.items()):
            ended = os.waitpid(pid, os.WNOHANG)[0]
            if ended or time.monotonic() > kill_at:  # a check ignoring its alarm, or what it left running
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            if ended:
                del children[pid]
        time.sleep(BUSY_POLL_S if children or jobs else IDLE_POLL_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
