"""Commands that only read the experience store write nothing: in a missing or empty home (or one with no
store yet) they answer empty, or with a one-line error, and leave the home as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recreate.experience.cli import app

READS = {  # arguments -> (exit code, what stdout holds)
    ("ls",): (0, ""),
    ("ls", "--json"): (0, "[]\n"),
    ("search", "failing tests"): (0, ""),
    ("search", "failing tests", "--json"): (0, "[]\n"),
    ("search", "pip install", "--scope", "memory", "--json"): (0, "[]\n"),
    ("verify",): (0, "ok: files, catalog and index agree\n"),
}


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() if p.is_file() else "/" for p in sorted(root.rglob("*"))}


@pytest.fixture(params=["missing", "empty", "other state"])
def home(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RECREATE_EMBEDDING", "hash")
    home = tmp_path / "home"
    if request.param != "missing":
        home.mkdir()
    if request.param == "other state":
        (home / "runs").mkdir()
        (home / "runs" / "note.txt").write_text("a run's file")
    return home


def invoke(home: Path, *args: str):
    return CliRunner().invoke(app, [*args, "--home", str(home)])


@pytest.mark.parametrize("args", READS, ids=" ".join)
def test_a_read_leaves_the_home_as_it_was(home: Path, args: tuple[str, ...]) -> None:
    before = tree(home.parent)
    done = invoke(home, *args)
    code, stdout = READS[args]
    assert (done.exit_code, done.stdout) == (code, stdout), done.output
    assert tree(home.parent) == before


def test_show_and_export_in_a_home_without_a_store(home: Path) -> None:
    out = home.parent / "out.jsonl"
    before = tree(home.parent)
    shown = invoke(home, "show", "t-1")
    assert shown.exit_code != 0 and "no trajectory 't-1'" in str(shown.exception)
    exported = invoke(home, "export", str(out))
    assert exported.exit_code == 0 and "wrote 0 trajectories" in exported.stdout
    assert out.read_text() == ""
    assert tree(home.parent) == {**before, out.name: ""}


def test_bad_search_options_fail_alike_without_a_store(home: Path) -> None:
    for args in (("--scope", "everything"), ("--scope", "summaries", "--error-type", "KeyError")):
        done = invoke(home, "search", "x", *args)
        assert isinstance(done.exception, ValueError), done.output
    assert not home.parent.joinpath("home", "experience").exists()


def test_a_store_once_written_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same commands after an import see what it stored (the store is opened, not skipped)."""
    monkeypatch.setenv("RECREATE_EMBEDDING", "hash")
    home = tmp_path / "home"
    fixture = Path(__file__).parent / "fixtures" / "acme__widgets-42.traj.json"
    assert invoke(home, "import", str(fixture)).exit_code == 0
    (entry,) = json.loads(invoke(home, "ls", "--json").stdout)
    assert entry["task_id"] == "acme__widgets-42"
    hits = json.loads(invoke(home, "search", "pytest failed", "--json").stdout)
    assert hits and hits[0]["metadata"]["trajectory_id"] == entry["id"]
