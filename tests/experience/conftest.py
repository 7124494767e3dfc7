from __future__ import annotations

from pathlib import Path

import pytest

from recreate.experience import minilm_onnx
from recreate.experience.store import ExperienceStore


@pytest.fixture
def store(tmp_path: Path) -> ExperienceStore:
    """A store with the fast hashing embedding (semantic tests open their own MiniLM store)."""
    return ExperienceStore(tmp_path / "experience", embedding="hash")


@pytest.fixture(scope="session")
def minilm_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MiniLM exported to ONNX once per test session, as a home's `models` folder."""
    models = tmp_path_factory.mktemp("models")
    minilm_onnx.export(models, "fp32")
    return models
