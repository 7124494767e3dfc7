"""Evaluator for the example domain, and the safe pattern for any evaluator that runs submitted code.

recreate runs it INSIDE a fresh sandbox:

    recreate domain selftest jsonl --data examples/custom_domain/tasks.jsonl \
        --evaluator "python3 /evaluator/evaluate.py"

The working folder holds `submission.txt` (the agent's code) and `task.json` (id, task, expected,
metadata; the task's extra fields `function` and `tests` are in metadata.fields). This folder is
mounted read-only at /evaluator (without the tasks file). The last JSON line printed is the verdict.

The pattern: this process (the judge) never runs the submission. It reads what it needs, deletes
`task.json` and makes itself unreadable to other processes, then runs the submission in a CHILD process
that gets only the test inputs and returns only data (JSON). The judge compares that data with the
expected outputs, which never were in any file or memory the child could read, and prints the verdict.
Whatever the child prints or does (exit 0, print a passing line, read every file) is just data or a
crash: it cannot reach the verdict.
"""

import ctypes
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD_TIMEOUT_S = 20
# Runs in the child: define the submission, call the function on each input, return JSON on stdout.
CHILD = r"""
import json, os, sys
request = json.loads(sys.stdin.read())
results = os.fdopen(os.dup(1), "w")
sys.stdout = sys.stderr  # what the submission prints is not the data channel
outcomes = []
try:
    namespace = {}
    exec(request["code"], namespace)
    function = namespace.get(request["function"])
    if not callable(function):
        raise NameError(f"no function named {request['function']} was defined")
    for args in request["inputs"]:
        try:
            outcomes.append({"value": function(*args)})
        except Exception as exc:
            outcomes.append({"error": f"{type(exc).__name__}: {exc}"})
except Exception as exc:
    outcomes = {"error": f"the code does not run: {type(exc).__name__}: {exc}"}
results.write(json.dumps(outcomes, default=lambda value: {"not JSON": repr(value)[:200]}))
results.flush()
"""


def hide_this_process() -> None:
    """Not dumpable: a process of the same user can no longer read our memory or open our stdout."""
    PR_SET_DUMPABLE = 4
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")


def run_submission(code: str, function: str, inputs: list) -> list | dict:
    """The child's outcomes: one {"value"} or {"error"} per input, or {"error"} for the whole run."""
    request = json.dumps({"code": code, "function": function, "inputs": inputs})
    try:
        child = subprocess.run(
            [sys.executable, "-I", "-c", CHILD],
            input=request,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
            cwd=tempfile.mkdtemp(),
        )
    except subprocess.TimeoutExpired:
        return {"error": f"the code did not finish within {CHILD_TIMEOUT_S} s"}
    try:
        return json.loads(child.stdout)
    except ValueError:
        return {"error": f"the code crashed (exit {child.returncode}): {child.stderr[-300:]}"}


def main() -> None:
    hide_this_process()
    task = json.loads(Path("task.json").read_text())
    Path("task.json").unlink()  # the expected outputs now live only in this (hidden) process
    code = Path("submission.txt").read_text()
    fields = task["metadata"]["fields"]
    inputs = [args for args, _ in fields["tests"]]
    outcomes = run_submission(code, fields["function"], inputs)
    if not isinstance(outcomes, list) or len(outcomes) != len(inputs):
        why = outcomes.get("error") if isinstance(outcomes, dict) else "malformed results"
        print(json.dumps({"score": 0, "feedback": str(why)}))
        return
    failures = []
    for (args, expected), outcome in zip(fields["tests"], outcomes, strict=True):
        got = outcome.get("value", outcome.get("error")) if isinstance(outcome, dict) else outcome
        if not isinstance(outcome, dict) or "value" not in outcome or got != expected:
            failures.append(f"{fields['function']}(*{args!r}) returned {got!r}, expected {expected!r}")
    score = 1 - len(failures) / len(inputs)
    feedback = "all tests pass" if not failures else "; ".join(failures)
    print(json.dumps({"score": score, "feedback": feedback}))


if __name__ == "__main__":
    main()
