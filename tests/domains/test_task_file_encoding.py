"""A tasks file that is not UTF-8 is one clear error naming the file and the line, for every domain."""

from pathlib import Path

import pytest

from recreate.domains import DomainDataError, get_domain


@pytest.mark.parametrize("domain", ["jsonl", "math", "ds1000"])
def test_a_non_utf8_tasks_file_names_itself(tmp_path: Path, domain: str) -> None:
    tasks = tmp_path / "latin1.jsonl"
    tasks.write_bytes('{"id": "a", "task": "t"}\n{"id": "b", "task": "caf\u00e9"}\n'.encode("latin-1"))
    with pytest.raises(DomainDataError) as caught:
        get_domain(domain, data=tasks)
    assert str(caught.value) == (
        f"{tasks}:2: not UTF-8 text (byte 0xe9 at column 25); save the file as UTF-8"
    )


def test_a_tasks_file_saved_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    """Windows editors save UTF-8 with a byte-order mark; it was read as 'not valid JSON' on line 1."""
    tasks = tmp_path / "bom.jsonl"
    rows = '{"id": "a", "task": "t", "expected": "1"}\n{"id": "b", "task": "\u00e9", "expected": "2"}\n'
    tasks.write_bytes(b"\xef\xbb\xbf" + rows.encode())
    loaded = get_domain("jsonl", data=tasks).tasks("all")
    assert sorted(task.id for task in loaded) == ["a", "b"]
