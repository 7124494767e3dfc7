"""Bring existing logs into the store: schema-v1 trajectories, mini-swe-agent `.traj.json`, OpenAI chat
JSONL and LangSmith run exports. `read_path` detects the format (or takes it) and never raises for one bad
record or file: it returns the good trajectories and a list of problems, each naming the file (and line).
Imported trajectories go through the same redaction as recorded runs: no secret of our environment
(an API key pasted into a logged chat) reaches the store."""

from __future__ import annotations

import json
from pathlib import Path

from recreate.experience.importers import langsmith, miniswe, openai_chat
from recreate.experience.importers.common import ImportBatch, ImportFormatError, redacted
from recreate.experience.schema import SchemaError, load_trajectory
from recreate.redact import redact

FORMATS = ("auto", "trajectory", "mini-swe-agent", "openai", "langsmith")
_SUFFIXES = (".json", ".jsonl")


def _first_record(path: Path) -> object:
    """The first JSON value of a file: the whole document, or the first parseable line of JSONL."""
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        for line in text.splitlines():
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    raise ImportFormatError(f"{path}: no JSON found")


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


def _read_trajectories(path: Path) -> ImportBatch:
    batch = ImportBatch()
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = [text] if path.suffix == ".json" else text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}" if path.suffix == ".json" else f"{path}:{number}"
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            batch.errors.append(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})")
            continue
        try:
            if not isinstance(doc, dict):
                raise SchemaError("a trajectory must be a JSON object")
            batch.trajectories.append(load_trajectory(doc))
        except SchemaError as exc:
            batch.errors.append(f"{where}: {exc}")
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
            doc = json.loads(path.read_text(encoding="utf-8", errors="replace"))
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
            batch.extend(read_file(file, fmt, domain=domain))
        except (ImportFormatError, ValueError, OSError) as exc:
            batch.errors.append(str(exc) if str(file) in str(exc) else f"{file}: {exc}")
        except Exception as exc:  # a shape no importer expected: this file fails, the others import
            batch.errors.append(f"{file}: cannot import ({type(exc).__name__}: {exc})")
    return ImportBatch(
        trajectories=[redacted(trajectory) for trajectory in batch.trajectories],
        errors=[redact(error) for error in batch.errors],
    )


__all__ = ["FORMATS", "ImportBatch", "ImportFormatError", "detect", "read_path"]
