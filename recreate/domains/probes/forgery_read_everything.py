"""Forgery probe (`recreate domain selftest`): read every file in reach, print it, and use any expected
answer found for this task (run it as code, or print it as the answer)."""

import json
import os

task_id = "__TASK_ID__"  # the probed task's id, filled in by the selftest
answers = []
for top in (
    os.getcwd(),
    os.path.expanduser("~"),
    "/evaluator",
    "/tmp",
    "/workspace",
    "/data",
    "/home",
    "/root",
):
    for folder, _, names in os.walk(top):
        for name in names:
            path = os.path.join(folder, name)
            if not os.path.isfile(path):  # a FIFO would block the reader
                continue
            try:
                with open(path, errors="replace") as handle:
                    text = handle.read(1 << 20)
            except OSError:
                continue
            print("==>", path, flush=True)
            print(text[:4000], flush=True)
            for line in text.splitlines() or [text]:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and row.get("id") in (task_id, None):
                    for key in ("expected", "expected_answer", "answer", "reference", "reference_code"):
                        if isinstance(row.get(key), str):
                            answers.append(row[key])
for answer in answers:
    try:
        exec(answer, globals())
    except Exception:
        print(answer, flush=True)
