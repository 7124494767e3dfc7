"""Search returns the true nearest neighbours among near-duplicate agent steps (exact up to the
vector file's limit, HNSW over-fetch beyond), and the CLI finds a needle by keywords and by meaning."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from recreate.experience.cli import app
from recreate.experience.schema import Trajectory
from recreate.experience.store import ExperienceStore
from tests.experience.factory import bash_step, make_trajectory, near_duplicate_runs

QUERIES = (
    "python solve.py --case 17",
    "cat src/mod_3.py loaded value",
    "KeyError price",
    "division by zero traceback",
    "pytest tests/test_42.py row col done",
    "ok ok ok row",
)


def _recall(store: ExperienceStore, query: str, filters: dict | None, k: int = 10) -> float:
    """Share of the hits within the exact k-th distance (ties make ids ambiguous, distances not),
    against brute force over the embeddings Chroma stores for the matching documents."""
    collection = store.index.collection("steps")
    where = None
    if filters:
        where = {"$and": [{a: b} for a, b in filters.items()]} if len(filters) > 1 else filters
    stored = np.asarray(collection.get(where=where, include=["embeddings"])["embeddings"])
    vector = np.asarray(store.index.embedding([query])[0])
    exact = np.sort(1 - stored @ vector / (np.linalg.norm(stored, axis=1) * np.linalg.norm(vector)))[:k]
    hits = store.search(query, filters=filters, k=k)
    assert all(all(h.metadata[a] == b for a, b in (filters or {}).items()) for h in hits)
    return sum(h.distance <= exact[-1] + 1e-5 for h in hits) / k


@pytest.fixture(scope="module")
def near_duplicates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExperienceStore]:
    with ExperienceStore(tmp_path_factory.mktemp("near") / "experience", embedding="hash") as store:
        store.ingest(near_duplicate_runs(100))  # 2,000 steps: Chroma's HNSW alone misses some (0.7 worst)
        yield store


@pytest.mark.parametrize("filters", [None, {"domain": "math"}, {"outcome": "failed", "task_id": "task-3"}])
def test_search_returns_the_exact_nearest_steps(
    near_duplicates: ExperienceStore, filters: dict | None
) -> None:
    assert near_duplicates.index.scans_exactly("steps")
    for query in QUERIES:
        assert _recall(near_duplicates, query, filters) == 1.0, query


def test_beyond_the_exact_limit_hnsw_candidates_are_over_fetched(near_duplicates: ExperienceStore) -> None:
    index = near_duplicates.index
    index.exact_limit = 0  # as a collection past the crossover, or a Chroma server
    try:
        assert not index.scans_exactly("steps")
        recalls = [_recall(near_duplicates, query, None) for query in QUERIES]
    finally:
        index.exact_limit = type(index).exact_limit
    assert np.mean(recalls) >= 0.95 and min(recalls) >= 0.9, recalls


def _needle_run() -> Trajectory:
    steps = [
        bash_step(0, "ls", stdout="solve.py  data.csv"),
        bash_step(
            1,
            "python -c 'import numpy as np; print(np.zeros(3))'",
            stderr='Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n'
            "ModuleNotFoundError: No module named 'numpy'",
            exit_code=1,
        ),
        bash_step(2, "python solve.py --case 1", stdout="ok row value"),
    ]
    return make_trajectory("needle", task_id="task-needle", steps=steps)


@pytest.mark.slow
def test_the_cli_finds_a_needle_by_keywords_and_by_meaning_quietly(
    recreate_home: Path, minilm_models: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("RECREATE_EMBEDDING", raising=False)  # the default a user gets: MiniLM
    recreate_home.mkdir(parents=True)
    (recreate_home / "models").symlink_to(minilm_models)  # exported once per session, not per test
    runs = near_duplicate_runs(30, steps=10, seed=1) + [_needle_run()]
    batch = tmp_path / "runs.jsonl"
    batch.write_text("".join(run.to_json().replace("\n", " ") + "\n" for run in runs))
    imported = CliRunner().invoke(app, ["import", str(batch)])
    assert imported.exit_code == 0, imported.output
    for query, k in (
        ("ModuleNotFoundError numpy", 3),
        ("the python interpreter could not find the scientific array library", 5),
    ):
        found = subprocess.run(
            [sys.executable, "-m", "recreate", "experience", "search", query, "-k", str(k)],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert found.returncode == 0 and found.stderr == "", found.stderr  # no "Loading weights" bar
        lines = found.stdout.splitlines()
        assert len(lines) == k
        distances = [float(line.split("distance=")[1].split()[0]) for line in lines]
        assert distances == sorted(distances) and 0 < distances[0] < 1
        assert any(line.startswith("needle  task=task-needle  step=1  ") for line in lines), found.stdout
