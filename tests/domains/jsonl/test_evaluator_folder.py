"""What a command evaluator can read at /evaluator decides its verdicts, so the rollout cache's key
holds it all: the script, the helper modules it imports, the data files it reads."""

from __future__ import annotations

import json
import os
from pathlib import Path

from recreate.domains import get_domain
from recreate.domains.jsonl import evaluator_folder
from recreate.domains.jsonl.evaluator_folder import folder_hashes
from recreate.evaluation.cache import settings_fingerprint

COMMAND = "python3 /evaluator/check.py"


def evaluator(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "evaluator"
    (folder / "lib").mkdir(parents=True)
    (folder / "check.py").write_text("from lib.rules import verdict\nprint(verdict())\n")
    (folder / "lib" / "rules.py").write_text("def verdict():\n    return '{\"score\": 1}'\n")
    tasks = folder / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "a", "task": "say 1", "expected": "1"}) + "\n")
    return folder, tasks


def key_of(tasks: Path, folder: Path, **options) -> dict:
    domain = get_domain("jsonl", data=tasks, evaluator=COMMAND, evaluator_dir=folder, **options)
    return settings_fingerprint(domain)


def test_a_changed_helper_module_or_data_file_is_another_evaluator(tmp_path):
    folder, tasks = evaluator(tmp_path)
    before = key_of(tasks, folder)
    assert set(before["evaluator_files"]) == {"check.py", "lib/rules.py"}  # the tasks file is not seen
    assert key_of(tasks, folder) == before
    (folder / "lib" / "rules.py").write_text("def verdict():\n    return '{\"score\": 0}'\n")
    changed = key_of(tasks, folder)
    assert (
        changed != before and changed["evaluator_files"]["check.py"] == before["evaluator_files"]["check.py"]
    )
    (folder / "lib" / "weights.txt").write_text("0.5\n")
    assert "lib/weights.txt" in key_of(tasks, folder)["evaluator_files"]


def test_bytecode_the_tasks_and_the_home_are_left_out(tmp_path, monkeypatch):
    folder, tasks = evaluator(tmp_path)
    home = folder / ".recreate"
    (home / "rollouts").mkdir(parents=True)
    monkeypatch.setenv("RECREATE_HOME", str(home))
    before = key_of(tasks, folder)
    (home / "rollouts" / "new.json").write_text("{}")  # a run writing its cache: not the evaluator
    (folder / "lib" / "__pycache__").mkdir()
    (folder / "lib" / "__pycache__" / "rules.cpython-311.pyc").write_bytes(b"\0" * 16)
    tasks.write_text(tasks.read_text() + json.dumps({"id": "b", "task": "say 2", "expected": "2"}) + "\n")
    assert key_of(tasks, folder)["evaluator_files"] == before["evaluator_files"]


def test_a_large_file_is_named_by_its_size_and_time_unread(tmp_path, monkeypatch):
    folder, tasks = evaluator(tmp_path)
    monkeypatch.setattr(evaluator_folder, "MAX_HASHED_FILE_MB", 0)
    (folder / "model.bin").write_bytes(b"x" * 100)
    os.utime(folder / "model.bin", ns=(10**18, 10**18))
    hashes = folder_hashes(folder, [tasks])
    assert hashes["model.bin"] == f"size 100 mtime {10**18}"
    os.utime(folder / "model.bin", ns=(2 * 10**18, 2 * 10**18))
    assert folder_hashes(folder, [tasks])["model.bin"] != hashes["model.bin"]


def test_a_python_evaluator_has_no_folder_in_its_key(tmp_path):
    folder, tasks = evaluator(tmp_path)
    domain = get_domain("jsonl", data=tasks, evaluator=lambda task, answer: 1.0, evaluator_dir=folder)
    assert settings_fingerprint(domain)["evaluator_files"] == {}


def test_a_linked_helper_folder_is_in_the_key_and_tool_caches_are_not(tmp_path):
    folder, tasks = evaluator(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "weights.py").write_text("W = 1\n")
    (folder / "lib" / "shared").symlink_to(shared, target_is_directory=True)
    (folder / "lib" / "loop").symlink_to(folder, target_is_directory=True)  # a link back up: walked once
    before = key_of(tasks, folder)["evaluator_files"]
    assert "lib/shared/weights.py" in before and not any(name.startswith("lib/loop/") for name in before)
    (shared / "weights.py").write_text("W = 2\n")
    assert key_of(tasks, folder)["evaluator_files"] != before
    for cache in (".git", ".pytest_cache", ".ruff_cache"):
        (folder / cache).mkdir()
        (folder / cache / "index").write_bytes(os.urandom(8))
    assert not any(name.startswith(".") for name in key_of(tasks, folder)["evaluator_files"])
