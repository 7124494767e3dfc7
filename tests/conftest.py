"""Fixtures shared by every test area."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from recreate.testing import ScriptedOpenAIServer

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
FAKE_KEY = "sk-test-SECRET-0123456789abcdefghij"


@pytest.fixture
def openai_server() -> Iterator[ScriptedOpenAIServer]:
    """A real HTTP server on 127.0.0.1 serving scripted chat completions."""
    with ScriptedOpenAIServer() as server:
        yield server


@pytest.fixture
def recreate_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated RECREATE_HOME; also runs the test from tmp_path so nothing lands in the repo."""
    home = tmp_path / "home"
    monkeypatch.setenv("RECREATE_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    return home


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fake API key in the environment; tests assert it never appears in files or logs."""
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    return FAKE_KEY


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is absent")
    return SHARED_DATA
