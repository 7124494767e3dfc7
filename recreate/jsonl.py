"""Appending to and reading the JSON-lines files a killed process may have left with a torn last line."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def append_jsonl(
    path: Path, rows: Iterable[dict[str, Any]], *, default: Callable[[Any], Any] | None = None
) -> None:
    """Append `rows` as JSON lines (`default` as in json.dumps). A torn last line is ended first, so the
    new rows stay readable (the readers skip the torn line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(row, ensure_ascii=False, default=default) + "\n" for row in rows)
    data = text.encode("utf-8")
    with path.open("a+b") as f:
        if f.seek(0, os.SEEK_END):
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                data = b"\n" + data
        f.write(data)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, in order. A line that is not one (torn by a killed
    writer) is skipped with a warning naming the file and line. Lines end at newlines only: the rows
    are written with ensure_ascii=False, so a string may hold U+2028 or U+0085, where splitlines() splits."""
    rows = []
    text = path.read_text(encoding="utf-8-sig", errors="replace")
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            log.warning("%s line %d is not JSON, skipped: %s", path, n, exc)
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            log.warning("%s line %d is not a JSON object, skipped", path, n)
    return rows
