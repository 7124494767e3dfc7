"""The per-domain environment definitions in sandboxes/ stay pinned, non-root and in sync."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SANDBOXES = REPO / "sandboxes"
DEFINITIONS = sorted(p.name for p in SANDBOXES.iterdir() if p.is_dir())


def requirements(name: str) -> list[str]:
    lines = (SANDBOXES / name / "requirements.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_expected_definitions_exist() -> None:
    assert {"base", "math", "ds1000"} <= set(DEFINITIONS)


@pytest.mark.parametrize("name", DEFINITIONS)
def test_definition_is_pinned_and_runs_unprivileged(name: str) -> None:
    dockerfile = (SANDBOXES / name / "Dockerfile").read_text()
    assert re.search(r"^FROM \S+:\S+", dockerfile, re.MULTILINE), "base image needs an explicit tag"
    assert re.findall(r"^USER (\S+)", dockerfile, re.MULTILINE)[-1] == "65534:65534"
    assert "requirements.txt" in dockerfile
    for requirement in requirements(name):
        assert re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[0-9][A-Za-z0-9.]*", requirement), requirement


def test_ds1000_pins_match_the_bwrap_environment_builder() -> None:
    from recreate.domains.ds1000.env import REQUIREMENTS

    assert requirements("ds1000") == list(REQUIREMENTS)
