from __future__ import annotations

from pathlib import Path

import pytest

from recreate.experience.store import ExperienceStore


@pytest.fixture
def store(tmp_path: Path) -> ExperienceStore:
    """A store with the fast hashing embedding (semantic tests open their own MiniLM store)."""
    return ExperienceStore(tmp_path / "experience", embedding="hash")
