"""append_jsonl / read_jsonl: rows land on lines of their own, also after a writer was killed mid-line,
and a torn line is skipped with a warning."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from recreate.jsonl import append_jsonl, read_jsonl


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


def test_read_skips_torn_and_non_object_lines_naming_them(tmp_path: Path, caplog) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes('{"a": 1}\n[2]\n\n{"b": "é"}\n{"c": "\xe9'.encode()[:-1])  # torn inside a character
    with caplog.at_level(logging.WARNING):
        assert read_jsonl(path) == [{"a": 1}, {"b": "é"}]
    assert (
        f"{path} line 2 is not a JSON object" in caplog.text and f"{path} line 5 is not JSON" in caplog.text
    )


def test_append_serialises_other_values_with_default(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    append_jsonl(path, [{"at": Path("/x")}], default=str)
    assert read_jsonl(path) == [{"at": "/x"}]
