"""A `jsonl` tasks file read into tasks (the format: `recreate.domains.jsonl.domain`)."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

from recreate.domains.base import Task
from recreate.domains.common import DomainDataError, first_field, read_jsonl

EXPECTED_FIELDS = ("expected", "expected_answer", "answer", "reference")


def load_tasks_file(path: Path) -> list[Task]:
    """The tasks of one JSONL file; a row with a problem is loaded as an invalid task naming it."""
    tasks = []
    for number, row in read_jsonl(path):
        task_id = str(row["id"]) if row.get("id") is not None else f"{path.stem}-line{number}"
        expected = first_field(row, EXPECTED_FIELDS)
        files = row.get("files") or {}
        extra = {
            k: v for k, v in row.items() if k not in ("id", "task", "files", "category", *EXPECTED_FIELDS)
        }
        metadata: dict[str, Any] = {
            "category": str(row.get("category", "all")),
            "file": str(path),
            "line": number,
            "fields": extra,  # the row's other fields (e.g. hidden tests), for the evaluator
        }
        problems = []
        if not task_id.strip() or not task_id.isprintable():
            problems.append(f"'id' {task_id!r} is no name; give the task a printable id or leave 'id' out")
        if not row.get("task"):
            problems.append("no 'task' text")
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            problems.append("'files' must map paths to text")
            files = {}
        outside = next((name for name in files if _leaves_workspace(name)), None)
        if outside is not None:
            problems.append(f"'files' path {outside!r} leaves the workspace; use a relative path inside it")
        if problems:
            metadata["invalid"] = f"{path}:{number}: {'; '.join(problems)}"
        tasks.append(
            Task(
                id=task_id,
                prompt=str(row.get("task") or ""),
                files=dict(files),
                reference=_reference(expected),
                metadata=metadata,
            )
        )
    if not tasks:
        raise DomainDataError(f"{path}: no tasks in the file")
    return tasks


def _reference(expected: Any) -> str | None:
    """The expected answer as text: a string as it is, any other JSON value as JSON writes it (`true`,
    `[1, 2]`, `{"a": 1}`; Python's str() gave `True` and `{'a': 1}`, which no JSON answer equals)."""
    if expected is None or isinstance(expected, str):
        return expected
    return json.dumps(expected, ensure_ascii=False)


def _leaves_workspace(name: str) -> bool:
    """A task file's path that is absolute or climbs out with `..` (the sandbox would refuse it at
    every rollout, each an error)."""
    path = PurePosixPath(name.replace("\\", "/"))
    return not name or path.is_absolute() or ".." in path.parts
