"""Helpers shared by the built-in domains: reading JSONL task files, zero scores with a reason,
submission limits, and running a checker script in a fresh sandbox session."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recreate.domains.base import Evaluation, Split, Task
from recreate.domains.splits import SplitPlan, check_unique_ids, select
from recreate.sandbox import fresh_session
from recreate.sandbox.base import Result, Sandbox, SandboxSpec, Session

log = logging.getLogger(__name__)

MAX_SUBMISSION_BYTES = 256 * 1024  # a real answer or solution is far smaller; beyond this it is junk


class DomainDataError(ValueError):
    """A task file cannot be read; the message names the file, the line and the fix."""


def read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; a line that is not a JSON object is an error."""
    if not path.is_file():
        raise DomainDataError(
            f"{path}: no such file; pass --data pointing at a .jsonl file or a folder of them"
        )
    rows = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")  # a byte-order mark: not text
            except UnicodeDecodeError as exc:
                raise DomainDataError(
                    f"{path}:{number}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
                    f"{exc.start + 1}); save the file as UTF-8"
                ) from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DomainDataError(
                    f"{path}:{number}: not valid JSON ({exc.msg}); fix or remove the line"
                ) from exc
            if not isinstance(row, dict):
                raise DomainDataError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
            rows.append((number, row))
    return rows


def jsonl_files(data: str | Path) -> list[Path]:
    """A .jsonl file, or every .jsonl file in a folder (sorted)."""
    path = Path(data).expanduser()
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise DomainDataError(f"{path}: folder has no .jsonl files")
        return files
    if not path.exists():
        raise DomainDataError(
            f"--data {path}: no such file or folder; give a .jsonl file or a folder of them"
        )
    return [path]


class TaskFileDomain:
    """What the built-in domains share: tasks read from local JSONL files (`load` turns one file into
    tasks), a seeded split plan, and task files put into the agent's workspace."""

    name = "task-file"

    def __init__(self, data: str | Path, load: Callable[[Path], list[Task]], plan: SplitPlan) -> None:
        self.plan = plan
        self._tasks = [task for path in jsonl_files(data) for task in load(path)]
        check_unique_ids(self._tasks, str(data))
        invalid = [task.metadata["invalid"] for task in self._tasks if task.metadata.get("invalid")]
        if invalid and len(invalid) == len(self._tasks):  # a run would be all errors: say so now
            raise DomainDataError(
                f"no task in {data} can be judged by the {self.name} domain (first: {invalid[0]}): "
                "is it another domain's file? fix the rows or pass the right --domain"
            )
        if invalid:  # kept (ids and splits stay as the file says) but said now, not at each run's 0
            log.warning(
                "%d task(s) in %s cannot be judged and score 0 in every run (first: %s); fix or remove them",
                len(invalid), data, invalid[0],
            )  # fmt: skip

    def tasks(self, split: Split = "all") -> list[Task]:
        return select(self._tasks, split, self.plan)

    def prepare(self, task: Task, session: Session) -> None:
        for name, content in task.files.items():
            session.put(name, content)


def others_can_read(path: Path) -> bool:
    """Whether a user other than us can reach `path`. A sandbox started by root runs as a throwaway
    unprivileged uid, so everything bound into it must be reachable by others (not under /root)."""
    path = path.resolve()
    if not all(p.stat().st_mode & stat.S_IXOTH for p in (*path.parents, path) if p.is_dir()):
        return False
    return bool(path.stat().st_mode & stat.S_IROTH)


def unreadable_hint(path: Path, fix: str) -> str:
    """Why binding `path` into a root-started sandbox fails, and `fix`; empty when it is not the cause."""
    if os.geteuid() != 0 or others_can_read(path):
        return ""
    return (
        f"; the sandbox runs as an unprivileged user who cannot read {path} (a private parent folder): {fix}"
    )


def shareable_copy(path: Path) -> Path:
    """`path` itself if a sandbox can bind it, else a copy in a world-readable cache (made once per
    source version)."""
    if os.geteuid() != 0 or others_can_read(path):
        return path
    cache = Path(tempfile.gettempdir()) / "recreate-shared-libs"
    cache.mkdir(exist_ok=True)
    cache.chmod(0o755)
    version = hashlib.sha256(f"{path.resolve()}:{path.stat().st_mtime_ns}".encode()).hexdigest()[:12]
    target = cache / version / path.name
    if not target.exists():
        staging = cache / f".{version}-{path.name}-{os.getpid()}"
        shutil.copytree(path, staging, dirs_exist_ok=True)
        for folder, _, files in os.walk(staging):
            Path(folder).chmod(0o755)
            for name in files:
                (Path(folder) / name).chmod(0o644)
        target.parent.mkdir(mode=0o755, exist_ok=True)
        try:
            staging.rename(target)
        except OSError:  # another process made it first
            shutil.rmtree(staging, ignore_errors=True)
    return target


def first_field(row: dict[str, Any], names: tuple[str, ...]) -> Any:
    """The value of the first of `names` present (and not null) in `row`, else None."""
    for name in names:
        if row.get(name) is not None:
            return row[name]
    return None


def tasks_phrase(task_ids: list[str], one: str, many: str) -> str:
    """ "the task imports" for one task, "12 tasks (e.g. ds1000-3) import" for more (`one`, `many`: verbs)."""
    return f"the task {one}" if len(task_ids) == 1 else f"{len(task_ids)} tasks (e.g. {task_ids[0]}) {many}"


def zero(reason: str, **details: Any) -> Evaluation:
    """Score 0: the reason goes to the feedback the optimizer reads."""
    return Evaluation(score=0.0, passed=False, feedback=reason, details={"error": reason, **details})


def submission_problem(task: Task, submission: str | None) -> Evaluation | None:
    """A zero score when the task or the submission cannot be judged at all, else None."""
    if task.metadata.get("invalid"):
        return zero(f"task {task.id} cannot be judged: {task.metadata['invalid']}")
    if submission is None:
        return zero("no submission: the agent finished without submitting anything")
    if not isinstance(submission, str):
        return zero(f"submission must be text, got {type(submission).__name__}")
    size = len(submission.encode("utf-8", errors="replace"))
    if size > MAX_SUBMISSION_BYTES:
        return zero(
            f"submission is {size} bytes, over the {MAX_SUBMISSION_BYTES}-byte limit; submit only the answer "
            f"or solution code, not logs or data",
            submission_bytes=size,
        )
    return None


def tail(text: str, lines: int = 12, chars: int = 1500) -> str:
    kept = "\n".join(text.rstrip().splitlines()[-lines:])
    return kept[-chars:]


@dataclass
class CheckRun:
    """What a checker script reported (its last `marker` JSON line), plus the raw process result."""

    report: dict[str, Any] | None
    result: Result | None
    error: str | None = None


def run_check(
    sandbox: Sandbox,
    spec: SandboxSpec,
    script: Path,
    files: dict[str, str | bytes],
    command: str,
    timeout: float,
) -> CheckRun:
    """Run a checker script (a file of a domain's checks/ folder) in a fresh session. The checker reads
    the per-run marker from `marker.txt` (deleted before judged code runs) and prints `<marker> <json>`
    lines, merged in order into the report, so output of the judged code cannot pose as the verdict by
    accident."""
    marker = "RECREATE-VERDICT-" + secrets.token_hex(8)
    try:
        with fresh_session(sandbox, spec) as session:
            session.put("check.py", script.read_bytes())
            session.put("marker.txt", marker)
            for name, data in files.items():
                session.put(name, data)
            result = session.run(command, timeout=timeout)
    except Exception as exc:  # evaluate() never raises: a broken sandbox scores 0 with the reason
        return CheckRun(None, None, f"the evaluation sandbox failed: {exc}")
    report: dict[str, Any] | None = None
    for line in result.stdout.splitlines():
        if line.startswith(marker + " "):
            try:
                part = json.loads(line[len(marker) + 1 :])
            except json.JSONDecodeError:
                continue
            if isinstance(part, dict):
                report = {**(report or {}), **part}
    return CheckRun(report, result)
