"""`load_run` on a run directory with a damaged file: one BrokenRun (an ArgumentError), one line, naming
the file and the fix; never a raw JSON, sqlite or TypeError traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import recreate
from recreate.errors import ArgumentError
from recreate.runs import BrokenRun, EvolveResult

GOOD_RESULT = EvolveResult(run_id="r1", run_dir=Path("."), final=None, stopped="budget").to_json()
VERSIONS = [{"name": "base", "index": 0}, {"name": "p1", "index": 1, "gguf": "/m.gguf", "hf_dir": "/hf"}]


@pytest.fixture
def run_dir(recreate_home: Path) -> Path:
    """A run that stopped early, without checkpoints, that load_run reads back whole."""
    path = recreate_home / "runs" / "r1"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"run_id": "r1", "agent_model": "openai:gpt-4.1-mini"}))
    (path / "result.json").write_text(json.dumps(GOOD_RESULT))
    return path


def test_the_intact_run_loads(run_dir: Path) -> None:
    loaded = recreate.load_run("r1")
    assert loaded.run_id == "r1" and loaded.stopped == "budget" and loaded.model == "openai:gpt-4.1-mini"


def broken(run_dir: Path, file: str) -> str:
    with pytest.raises(BrokenRun) as caught:
        recreate.load_run("r1")
    message = str(caught.value)
    assert isinstance(caught.value, ArgumentError)
    assert message.startswith(str(run_dir / file)) and "\n" not in message, message
    assert message.endswith("restore it from a backup, or start a new run")
    return message


@pytest.mark.parametrize(
    "data",
    [b"{not json", b"[1, 2]", b'"a string"', b"", b"\xff\xfe{}", b"[" * 100_000, b'{"run_id": 7}'],
)
def test_a_broken_config(run_dir: Path, data: bytes) -> None:
    (run_dir / "config.json").write_bytes(data)
    broken(run_dir, "config.json")


@pytest.mark.parametrize(
    "data",
    [
        "{{{",
        "[]",
        "null",
        json.dumps({k: v for k, v in GOOD_RESULT.items() if k != "run_id"}),
        json.dumps(GOOD_RESULT | {"history": "oops"}),
        json.dumps(GOOD_RESULT | {"usage": 3, "test": None, "models": {"a": 1}}),
        json.dumps(GOOD_RESULT | {"final": 5}),
    ],
)
def test_a_broken_result(run_dir: Path, data: str) -> None:
    (run_dir / "result.json").write_text(data)
    broken(run_dir, "result.json")


@pytest.mark.parametrize(
    "data",
    [
        "{oops",
        "{}",
        json.dumps([{"name": "p1"}]),
        json.dumps(["p1"]),
        json.dumps([{"name": "p1", "index": 1, "gguf": "/m.gguf"}]),  # no hf_dir
    ],
)
def test_broken_policy_versions(run_dir: Path, data: str) -> None:
    config = json.loads((run_dir / "config.json").read_text()) | {"finetune": {"every": 1}}
    (run_dir / "config.json").write_text(json.dumps(config))
    (run_dir / "result.json").write_text(json.dumps(GOOD_RESULT | {"final_model": "p1"}))
    (run_dir / "policy").mkdir()
    (run_dir / "policy" / "versions.json").write_text(json.dumps(VERSIONS))
    assert recreate.load_run("r1").model == "local:/m.gguf"  # intact: the fine-tuned version
    (run_dir / "policy" / "versions.json").write_text(data)
    broken(run_dir, "policy/versions.json")


@pytest.mark.parametrize(
    "data", [b"not a database at all" * 100, b"SQLite format 3\x00" + b"\x07" * 4000, b"\x00" * 8192]
)
def test_checkpoints_that_are_not_a_database(run_dir: Path, data: bytes) -> None:
    (run_dir / "checkpoints.sqlite").write_bytes(data)
    assert "checkpoints" in broken(run_dir, "checkpoints.sqlite")


def test_the_command_line_shows_it_in_one_line(run_dir: Path, tmp_path: Path) -> None:
    """Through the CLI's own error path (recreate.cli.main): `error: <one line>`, exit 2."""
    (run_dir / "config.json").write_text("[1, 2]")
    script = (  # a command that reads the run back, through the CLI's one error path
        "import recreate, recreate.cli as cli; "
        "cli.command = lambda: lambda **_: recreate.load_run('r1'); cli.main()"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "config.json is not a JSON object" in line
