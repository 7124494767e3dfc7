"""append_jsonl: rows land on lines of their own, also after a writer was killed mid-line."""

from __future__ import annotations

import json
from pathlib import Path

from recreate.jsonl import append_jsonl


def test_appends_rows_to_new_and_existing_files(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "rows.jsonl"
    append_jsonl(path, [{"a": 1}])
    append_jsonl(path, [{"b": "é"}, {"c": None}])
    assert [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] == [
        {"a": 1},
        {"b": "é"},
        {"c": None},
    ]


def test_a_torn_last_line_is_ended_before_new_rows(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n{"b": ')  # a writer died mid-line
    append_jsonl(path, [{"c": 3}])
    lines = path.read_text().splitlines()
    assert lines == ['{"a": 1}', '{"b": ', '{"c": 3}']
