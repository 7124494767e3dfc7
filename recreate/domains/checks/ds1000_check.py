"""Runs INSIDE an evaluation sandbox with the pinned DS-1000 environment: judge one solution.

Reads problem.json {"code_context", "solution"}, runs the problem's own `test_execution(solution)`
(and `test_string(solution)` when defined) in the working folder `work/`, and prints
"<marker> {json verdict}". After a failed check it prints a second line with diagnostics: the failing
line of the test context and, for the first test case, the expected and the produced `result`.
"""

import contextlib
import json
import os
import sys
import traceback
from pathlib import Path

CONTEXT_FILE = "<ds1000 test context>"


def _short(value, limit=600):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def _failing_line(exc, code_context):
    lines = code_context.splitlines()
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == CONTEXT_FILE and 0 < frame.lineno <= len(lines):
            return lines[frame.lineno - 1].strip()
    return None


def _expected_and_got(namespace, solution):
    """Re-run test case 1 outside the assert, to show what was expected and what the solution produced."""
    test_input, expected = namespace["generate_test_case"](1)
    if expected is None or "exec_context" not in namespace:
        return {}
    env = {"test_input": test_input}
    exec(namespace["exec_context"].replace("[insert]", solution), env)
    return {"expected": _short(expected), "got": _short(env.get("result", "<no variable named result>"))}


def main():
    marker = Path("marker.txt").read_text().strip()
    os.remove("marker.txt")
    problem = json.loads(Path("problem.json").read_text())
    code_context, solution = problem["code_context"], problem["solution"]
    os.makedirs("work", exist_ok=True)
    os.chdir("work")
    namespace = {"__name__": "ds1000_test_context"}
    stage = "loading the test context"
    try:
        exec(compile(code_context, CONTEXT_FILE, "exec"), namespace)
        stage = "test_execution"
        namespace["test_execution"](solution)
        if "test_string" in namespace:
            stage = "test_string"
            namespace["test_string"](solution)
    except BaseException as exc:  # the solution may raise anything, SystemExit included
        verdict = {
            "passed": False,
            "stage": stage,
            "exception": type(exc).__name__,
            "message": str(exc)[:1000],
            "failing_line": _failing_line(exc, code_context),
            # from the test context down: this script's own frame is noise to the reader
            "traceback": "".join(traceback.format_exception(exc.with_traceback(exc.__traceback__.tb_next)))[
                -1500:
            ],
        }
        print(marker, json.dumps(verdict), flush=True)
        if stage == "test_execution" and isinstance(exc, AssertionError):
            with contextlib.suppress(BaseException):  # diagnostics only; the verdict is already out
                print(marker, json.dumps(_expected_and_got(namespace, solution)), flush=True)
        return 0
    print(marker, json.dumps({"passed": True}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
