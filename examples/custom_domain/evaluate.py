"""Evaluator for the example domain. It runs INSIDE a fresh sandbox, started by recreate with:

    recreate domain selftest jsonl --data examples/custom_domain/tasks.jsonl \
        --evaluator "python3 /evaluator/evaluate.py"

The working folder holds `submission.txt` (the agent's code) and `task.json` (id, task, expected,
metadata; the task's extra fields `function` and `tests` are in metadata.fields). This folder is
mounted read-only at /evaluator. The last line printed is the verdict: {"score", "feedback"}.
"""

import json
from pathlib import Path


def main() -> None:
    task = json.loads(Path("task.json").read_text())
    fields = task["metadata"]["fields"]
    namespace: dict = {}
    try:
        exec(Path("submission.txt").read_text(), namespace)  # safe here: we are in the sandbox
    except Exception as exc:
        print(json.dumps({"score": 0, "feedback": f"the code does not run: {type(exc).__name__}: {exc}"}))
        return
    function = namespace.get(fields["function"])
    if not callable(function):
        print(json.dumps({"score": 0, "feedback": f"no function named {fields['function']} was defined"}))
        return
    failures = []
    for args, expected in fields["tests"]:
        try:
            got = function(*args)
        except Exception as exc:
            got = f"{type(exc).__name__}: {exc}"
        if got != expected:
            failures.append(f"{fields['function']}(*{args!r}) returned {got!r}, expected {expected!r}")
    score = 1 - len(failures) / len(fields["tests"])
    feedback = "all tests pass" if not failures else "; ".join(failures)
    print(json.dumps({"score": score, "feedback": feedback}))


if __name__ == "__main__":
    main()
