"""Appending to the JSON-lines files a killed process may have left with a torn last line."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def append_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Append `rows` as JSON lines. A torn last line is ended first, so the new rows stay readable (the
    readers skip the torn line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")
    with path.open("a+b") as f:
        if f.seek(0, os.SEEK_END):
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                data = b"\n" + data
        f.write(data)
