"""Helpers shared by the importers: stable ids, clean chat messages, per-item error reports."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from recreate.experience.schema import Trajectory, validation_summary
from recreate.redact import redact_data

_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")


class ImportFormatError(ValueError):
    """The input is not in the format the importer reads; the message says where and why."""


@dataclass
class ImportBatch:
    trajectories: list[Trajectory] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # "file:line: problem" — skipped, not fatal

    def extend(self, other: ImportBatch) -> None:
        self.trajectories += other.trajectories
        self.errors += other.errors


def read_text(path: Path) -> str:
    """A log file's text: UTF-8, a leading byte-order mark dropped, undecodable bytes replaced."""
    return path.read_text(encoding="utf-8-sig", errors="replace")


def split_lines(text: str) -> list[str]:
    """JSONL lines, split at newlines only: a JSON string may hold U+2028 or U+0085 unescaped
    (ensure_ascii=False), where str.splitlines() would cut a record in two."""
    return text.split("\n")


def redacted(trajectory: Trajectory) -> Trajectory:
    """The trajectory with every secret of our environment masked in each of its strings (keys too)."""
    return Trajectory.model_validate(redact_data(trajectory.model_dump()))


def non_finite(value: Any, where: str = "") -> str | None:
    """The path of the first NaN or infinite number in `value` (JSON-like), else None: JSON cannot
    hold one (the stored file would say null, which no longer loads)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where or 'value'} is {value}"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = non_finite(item, f"{where}.{key}" if isinstance(key, str) else f"{where}[{key}]")
        if found:
            return found
    return None


def storable_problem(trajectory: Trajectory) -> str | None:
    """Why `trajectory` cannot be stored as it is, with the fix, else None."""
    found = non_finite(trajectory.model_dump())
    if found:
        return f"{found.lstrip('.')}, not a finite number; fix or drop that value in the log"
    return None


def describe(exc: Exception) -> str:
    """One line for an importer's error: a pydantic error as `field: problem (got value)`."""
    if isinstance(exc, ValidationError):
        return validation_summary(exc)
    return " ".join(str(exc).split())


def stable_id(prefix: str, content: Any) -> str:
    """Same input, same id: importing a file twice reports duplicates instead of storing copies."""
    text = content if isinstance(content, str) else json.dumps(content, sort_keys=True, default=str)
    return f"{prefix}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:16]}"


def safe_id(prefix: str, raw: str) -> str:
    """An id from a foreign id, reduced to file-name-safe characters (hashed when that would change it)."""
    cleaned = "".join(c if c.isalnum() or c in "._-" else "-" for c in raw)[:150]
    return f"{prefix}-{cleaned}" if cleaned == raw and cleaned else stable_id(prefix, raw)


def clean_message(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat message with only the standard keys (drops tool-specific extras)."""
    return {k: message[k] for k in _MESSAGE_KEYS if k in message and message[k] is not None}


def parse_json_args(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments or "{}")
    except (TypeError, json.JSONDecodeError):
        return {"raw": str(arguments)}
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
