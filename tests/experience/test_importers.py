"""Importers on fixtures written from the documented formats: mini-swe-agent, OpenAI chat, LangSmith."""

from __future__ import annotations

import json
from pathlib import Path

from recreate.experience.importers import detect, read_path
from recreate.experience.store import ExperienceStore

FIXTURES = Path(__file__).parent / "fixtures"


def test_detects_each_format() -> None:
    assert detect(FIXTURES / "acme__widgets-42.traj.json") == "mini-swe-agent"
    assert detect(FIXTURES / "chats.jsonl") == "openai"
    assert detect(FIXTURES / "langsmith_runs.json") == "langsmith"


def test_mini_swe_agent_toolcall_format() -> None:
    batch = read_path(FIXTURES / "acme__widgets-42.traj.json")
    assert batch.errors == []
    (traj,) = batch.trajectories
    assert traj.task_id == "acme__widgets-42"  # from instance_id
    assert traj.domain == "swe"
    assert traj.model is not None and traj.model.name == "openai/gpt-5-mini"
    assert traj.outcome.exit_status == "submitted"
    assert traj.outcome.submission.startswith("diff --git")
    commands = [s.action.get("args", {}).get("command") for s in traj.steps]
    assert commands[0] == "cat widgets/size.py"
    assert "format_error" in traj.steps[1].action
    assert commands[3] == "python -m pytest tests/test_size.py -q"
    assert traj.steps[3].observation.exit_code == 1
    assert "1 failed, 2 passed" in traj.steps[3].observation.stdout
    assert traj.steps[0].usage.prompt_tokens == 812
    assert traj.totals.cost_usd == 0.0123
    assert traj.totals.format_errors == 1
    assert all(m["role"] != "exit" and "extra" not in m for m in traj.messages)


def test_mini_swe_agent_text_format_takes_task_from_file_name() -> None:
    (traj,) = read_path(FIXTURES / "acme__gadgets-7.traj.json").trajectories
    assert traj.task_id == "acme__gadgets-7"
    assert traj.outcome.exit_status == "max_steps"
    assert [s.action["args"]["command"] for s in traj.steps] == [
        "grep -rn counter gadgets/",
        "python gadgets/count.py",
    ]
    assert traj.steps[1].observation.exit_code == 1
    assert "OverflowError" in traj.steps[1].observation.stdout


def test_openai_jsonl_imports_good_lines_and_reports_bad_ones() -> None:
    batch = read_path(FIXTURES / "chats.jsonl")
    assert [t.task_id for t in batch.trajectories][:2] == ["mult-17-23", "capital-fr"]
    assert len(batch.trajectories) == 3
    bad_lines = sorted(int(e.split(":")[1]) for e in batch.errors)
    assert bad_lines == [3, 4, 5, 7]
    assert any("not valid JSON" in e for e in batch.errors)
    first = batch.trajectories[0]
    assert first.domain == "math"
    assert first.steps[0].action == {"tool": "python", "args": {"code": "print(17*23)"}}
    assert first.steps[0].observation.stdout == "391"
    assert first.outcome.submission == "391"
    assert first.evaluation.passed and first.metadata["difficulty"] == "easy"
    second = batch.trajectories[1]
    assert second.trajectory_id == "oai-conv-2"
    assert second.evaluation.passed is False and second.model.name == "tiny-chat"
    assert batch.trajectories[2].evaluation is None


def test_langsmith_export_one_trajectory_per_trace() -> None:
    batch = read_path(FIXTURES / "langsmith_runs.json")
    assert batch.errors == []
    ok, failed = sorted(batch.trajectories, key=lambda t: t.task_id != "primes-5")
    assert ok.task_id == "primes-5" and ok.domain == "math"
    assert ok.steps[0].action == {"tool": "python", "args": {"code": "print(2+3+5+7+11)"}}
    assert ok.steps[0].observation.stdout == "28"
    assert ok.steps[0].usage.prompt_tokens == 120
    assert ok.model.name == "gpt-4o-mini"
    assert ok.evaluation.passed and ok.evaluation.score == 1.0
    assert [m["role"] for m in ok.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert ok.messages[-1]["content"] == "The answer is 28."
    assert ok.totals.cost_usd == 0.0007
    assert failed.task_id == "ls-files"
    assert failed.outcome.exit_status == "error"
    assert failed.steps[0].error.startswith("PermissionError")


def test_langsmith_jsonl_with_a_corrupt_line(tmp_path: Path) -> None:
    runs = json.loads((FIXTURES / "langsmith_runs.json").read_text())
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in runs[:4]) + '\n{"id": "77", "run_ty\n', encoding="utf-8")
    batch = read_path(path, "langsmith")
    assert len(batch.trajectories) == 1
    assert batch.errors and "runs.jsonl:5" in batch.errors[0]


def test_import_directory_into_store_twice_reports_duplicates(store: ExperienceStore) -> None:
    batch = read_path(FIXTURES)
    first = store.ingest(batch.trajectories)
    assert len(first.added) == 1 + 1 + 3 + 2
    before = {p: p.read_bytes() for p in store.files.glob("*/*.json")}
    again = store.ingest(read_path(FIXTURES).trajectories)
    assert again.added == [] and sorted(again.duplicates) == sorted(first.added)
    assert {p: p.read_bytes() for p in store.files.glob("*/*.json")} == before
    hits = store.search("pytest size", filters={"task_id": "acme__widgets-42"}, k=2)
    assert hits and all(h.metadata["task_id"] == "acme__widgets-42" for h in hits)


FAKE_KEY = "sk-test-FAKE0123456789abcdefGHIJ"


def _plant_key(tmp_path: Path) -> Path:
    """Each fixture format, with the (fake) live OPENAI_API_KEY pasted into its logged text."""
    folder = tmp_path / "logs"
    folder.mkdir()
    for fixture in FIXTURES.iterdir():
        text = fixture.read_text(encoding="utf-8")
        planted = text.replace("print(17*23)", f"print('{FAKE_KEY}')")
        planted = planted.replace("cat widgets/size.py", f"export OPENAI_API_KEY={FAKE_KEY}")
        planted = planted.replace("grep -rn counter gadgets/", f"curl -H 'Bearer {FAKE_KEY}'")
        planted = planted.replace("print(2+3+5+7+11)", f"key = '{FAKE_KEY}'")
        assert planted != text, fixture.name
        (folder / fixture.name).write_text(planted, encoding="utf-8")
    return folder


def test_every_importer_masks_secrets_of_our_environment(
    tmp_path: Path, monkeypatch, store: ExperienceStore
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    folder = _plant_key(tmp_path)
    for fixture in folder.iterdir():
        batch = read_path(fixture)
        assert batch.trajectories, fixture.name
        for trajectory in batch.trajectories:
            assert FAKE_KEY not in trajectory.to_json(), fixture.name
    report = store.ingest(read_path(folder).trajectories)
    assert len(report.added) == 7
    stored = "".join(p.read_text() for p in store.files.glob("*/*.json"))
    assert FAKE_KEY not in stored and "***" in stored
    hits = store.search("Bearer key export", k=20)
    assert hits and all(FAKE_KEY not in hit.document for hit in hits)


def test_a_bad_file_fails_alone_and_names_itself(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    for fixture in FIXTURES.iterdir():
        (folder / fixture.name).write_bytes(fixture.read_bytes())
    broken = json.loads((FIXTURES / "acme__widgets-42.traj.json").read_text())
    broken["messages"] = [1, 2, 3]
    (folder / "broken.traj.json").write_text(json.dumps(broken))
    odd = json.loads((FIXTURES / "acme__gadgets-7.traj.json").read_text())
    odd["info"] = ["not", "a", "dict"]
    (folder / "odd.traj.json").write_text(json.dumps(odd))
    batch = read_path(folder)
    assert len(batch.trajectories) == 7  # every good file still imports
    broken_error, odd_error = sorted(e for e in batch.errors if "chats.jsonl" not in e)
    assert broken_error.startswith(f"{folder / 'broken.traj.json'}: messages[0] is int")
    assert odd_error.startswith(f"{folder / 'odd.traj.json'}: cannot import (AttributeError")


def test_folder_import_command_stores_the_good_files_and_lists_the_bad(
    tmp_path: Path, recreate_home: Path, monkeypatch
) -> None:
    from typer.testing import CliRunner

    from recreate.experience.cli import app

    monkeypatch.setenv("RECREATE_EMBEDDING", "hash")
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "good.traj.json").write_bytes((FIXTURES / "acme__widgets-42.traj.json").read_bytes())
    (folder / "bad.traj.json").write_text(json.dumps({"messages": [7]}))
    result = CliRunner().invoke(app, ["import", str(folder)])
    assert result.exit_code == 1
    assert f"{folder / 'bad.traj.json'}: messages[0] is int" in result.output
    assert "1 added" in result.output
    listed = CliRunner().invoke(app, ["ls"])
    assert "acme__widgets-42" in listed.output
