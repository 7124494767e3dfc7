"""Evaluator of the test domain: the submission must equal the expected word exactly."""

import json
from pathlib import Path

task = json.loads(Path("task.json").read_text())
got = Path("submission.txt").read_text().strip()
ok = got == task["expected"]
feedback = "correct" if ok else f"expected {task['expected']!r}, got {got!r}: answers must match exactly"
print(json.dumps({"score": 1.0 if ok else 0.0, "feedback": feedback}))
