"""Bring existing logs into the store: schema-v1 trajectories, mini-swe-agent `.traj.json`, OpenAI chat
JSONL and LangSmith run exports. `read_path` detects the format (or takes it) and never raises for one bad
record or file: it returns the good trajectories and a list of problems, each naming the file (and line).
Imported trajectories go through the same redaction as recorded runs: no secret of our environment
(an API key pasted into a logged chat) reaches the store."""

from __future__ import annotations

import json
from pathlib import Path

from recreate.experience.importers import langsmith, miniswe, openai_chat
from recreate.experience.importers.common import (
    ImportBatch,
    ImportFormatError,
    describe,
    read_text,
    redacted,
    split_lines,
    storable_problem,
)
from recreate.experience.schema import SchemaError, load_trajectory
from recreate.redact import redact

FORMATS = ("auto", "trajectory", "mini-swe-agent", "openai", "langsmith")
_SUFFIXES = (".json", ".jsonl")


def _first_record(path: Path) -> object:
    """The first JSON value of a file: the whole document, or the first parseable line of JSONL."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        whole = exc
    for line in split_lines(text):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    raise ImportFormatError(
        f"{path}: not JSON ({whole.msg} at line {whole.lineno} column {whole.colno}); a truncated or "
        "non-UTF-8 file? re-export it as UTF-8 JSON or JSONL"
    )


def detect(path: Path) -> str:
    if path.name.endswith(".traj.json"):
        return "mini-swe-agent"
    first = _first_record(path)
    if isinstance(first, dict) and isinstance(first.get("runs"), list):
        return "langsmith"
    if isinstance(first, list):
        first = first[0] if first else {}
    if not isinstance(first, dict):
        raise ImportFormatError(f"{path}: cannot tell the format (not a JSON object)")
    if "schema_version" in first:
        return "trajectory"
    if "run_type" in first:
        return "langsmith"
    if str(first.get("trajectory_format", "")).startswith("mini-swe-agent") or "info" in first:
        return "mini-swe-agent"
    if "messages" in first:
        return "openai"
    raise ImportFormatError(f"{path}: cannot tell the format; pass one of {', '.join(FORMATS[1:])}")


def _documents(path: Path) -> list[tuple[str, object]]:
    """(where, parsed JSON or the JSONDecodeError) for each document: a .json file is one document or
    an array of them, a .jsonl file one a line."""
    text = read_text(path)
    if path.suffix != ".json":
        lines = [(f"{path}:{n}", line) for n, line in enumerate(split_lines(text), 1) if line.strip()]
    else:
        lines = [(str(path), text)]
    found: list[tuple[str, object]] = []
    for where, line in lines:
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            found.append((where, exc))
            continue
        if path.suffix == ".json" and isinstance(doc, list):
            found += [(f"{where}[{i}]", item) for i, item in enumerate(doc)]
        else:
            found.append((where, doc))
    return found


def _read_trajectories(path: Path) -> ImportBatch:
    batch = ImportBatch()
    for where, doc in _documents(path):
        if isinstance(doc, json.JSONDecodeError):
            batch.errors.append(f"{where}: not valid JSON ({doc.msg} at column {doc.colno}); fix or drop it")
            continue
        try:
            if not isinstance(doc, dict):
                raise SchemaError("a trajectory must be a JSON object")
            trajectory = load_trajectory(doc)
        except SchemaError as exc:
            batch.errors.append(f"{where}: {exc}")
            continue
        problem = storable_problem(trajectory)
        if problem:
            batch.errors.append(f"{where}: {problem}")
        else:
            batch.trajectories.append(trajectory)
    return batch


def read_file(path: Path, fmt: str = "auto", *, domain: str | None = None) -> ImportBatch:
    fmt = detect(path) if fmt == "auto" else fmt
    extra = {"domain": domain} if domain else {}
    if fmt == "trajectory":
        return _read_trajectories(path)
    if fmt == "openai":
        return openai_chat.read(path, **extra)
    if fmt == "langsmith":
        return langsmith.read(path, **extra)
    if fmt == "mini-swe-agent":
        try:
            doc = json.loads(read_text(path))
        except json.JSONDecodeError as exc:
            return ImportBatch(errors=[f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})"])
        if not isinstance(doc, dict):
            return ImportBatch(errors=[f"{path}: a mini-swe-agent trajectory is a JSON object"])
        return ImportBatch(trajectories=[miniswe.convert(doc, source=str(path), **extra)])
    raise ImportFormatError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def read_path(path: str | Path, fmt: str = "auto", *, domain: str | None = None) -> ImportBatch:
    """Read a file, or every .json/.jsonl file under a directory (sorted), into schema-v1 trajectories."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    files = sorted(p for p in path.rglob("*") if p.suffix in _SUFFIXES) if path.is_dir() else [path]
    batch = ImportBatch()
    for file in files:
        try:
            part = read_file(file, fmt, domain=domain)
        except (ImportFormatError, ValueError, OSError) as exc:
            said = describe(exc)
            batch.errors.append(said if str(file) in said else f"{file}: {said}")
            continue
        except Exception as exc:  # a shape no importer expected: this file fails, the others import
            batch.errors.append(f"{file}: cannot import ({type(exc).__name__}: {exc})")
            continue
        batch.errors += part.errors
        for trajectory in part.trajectories:
            problem = storable_problem(trajectory)
            if problem:
                where = trajectory.metadata.get("source") or f"{file} ({trajectory.trajectory_id})"
                batch.errors.append(f"{where}: {problem}")
            else:
                batch.trajectories.append(redacted(trajectory))
    return ImportBatch(trajectories=batch.trajectories, errors=[redact(error) for error in batch.errors])


__all__ = ["FORMATS", "ImportBatch", "ImportFormatError", "detect", "read_path"]
