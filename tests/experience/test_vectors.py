"""The vector file beside the index: append-only, crash-tolerant, exact filtered search from it."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from recreate.experience.store import ExperienceStore
from recreate.experience.vectors import VectorFile
from tests.experience.factory import bash_step, make_trajectory


def _unit(rows: list[list[float]]) -> np.ndarray:
    matrix = np.asarray(rows, dtype=np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def test_rows_appended_by_one_writer_are_seen_by_another_reader(tmp_path: Path) -> None:
    writer, reader = VectorFile(tmp_path / "c"), VectorFile(tmp_path / "c")
    writer.append(["a", "b"], [[1, 0, 0], [0, 2, 0]])
    writer.append(["c"], [[0, 0, 3]])
    ranked, missing = reader.nearest([0, 1, 0.1], ["a", "b", "c", "zz"], k=2)
    assert [i for i, _ in ranked] == ["b", "c"] and missing == ["zz"]
    assert ranked[0][1] == pytest.approx(1 - 1 / np.sqrt(1.01), abs=1e-6)  # cosine, rows stored unit length
    writer.append(["a"], [[0, 0, 1]])  # an upsert: the newest row wins
    writer.drop(["b"])
    assert reader.ids() == {"a", "c"}
    assert [i for i, _ in reader.nearest([0, 0, 1], ["a", "b", "c"], k=3)[0]] == ["a", "c"]
    with pytest.raises(ValueError, match="dimension 2"):
        writer.append(["d"], [[1, 0]])
    writer.reset()
    assert reader.ids() == set() and reader.nearest([1, 0, 0], ["a"], k=1) == ([], ["a"])


def test_a_killed_writer_leaves_nothing_half_visible(tmp_path: Path) -> None:
    first = VectorFile(tmp_path / "c")
    first.append(["a"], [[1, 0]])
    with open(first.vectors_path, "ab") as fh:  # killed after its vectors, before its ids
        fh.write(_unit([[0, 1]]).tobytes())
    with open(first.ids_path, "a") as fh:  # ... or in the middle of an id line
        fh.write("half")
    reader = VectorFile(tmp_path / "c")
    assert reader.ids() == {"a"}
    VectorFile(tmp_path / "c").append(["b"], [[0, 1]])  # the next writer cuts both back first
    assert first.ids_path.read_text().splitlines()[1:] == ["a", "b"]
    ranked, _ = reader.nearest([0, 1], ["a", "b"], k=2)
    assert ranked[0] == ("b", pytest.approx(0.0, abs=1e-6)) and ranked[1][0] == "a"


def _varied_store(store: ExperienceStore) -> None:
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    store.ingest(
        make_trajectory(
            f"t-{n}",
            task_id=f"task-{n % 5}",
            passed=n % 2 == 0,
            steps=[
                bash_step(i, f"python run.py {words[(n + i) % 6]} {words[(n * i) % 6]}", stdout="ok")
                if (n + i) % 3
                else bash_step(i, "python load.py", stderr="KeyError: 'x'", exit_code=1)
                for i in range(12)
            ],
        )
        for n in range(40)
    )


def _exact(store: ExperienceStore, query: str, filters: dict) -> list[float]:
    collection = store.index.collection("steps")
    where = {"$and": [{k: v} for k, v in filters.items()]}
    matching = np.asarray(collection.get(where=where, include=["embeddings"])["embeddings"])
    vector = np.asarray(store.index.embedding.embed_query([query])[0])
    cosine = matching @ vector / (np.linalg.norm(matching, axis=1) * np.linalg.norm(vector))
    return sorted(round(float(1 - c), 4) for c in cosine)[:5]


def test_many_matches_are_scored_exactly_from_the_vector_file(store: ExperienceStore) -> None:
    _varied_store(store)
    store.index.brute_force_limit, store.index.overfetch = 10, 1  # skip to the exact fallback
    filters = {"outcome": "failed", "error_type": "KeyError"}
    for query in ("python load error", "run alpha omega"):
        hits = store.search(query, filters=filters, k=5)
        assert [round(h.distance, 4) for h in hits] == _exact(store, query, filters)
        assert all(h.metadata["error_type"] == "KeyError" for h in hits)


def test_an_index_without_vector_files_gets_them_and_verify_reports_gaps(tmp_path: Path) -> None:
    store = ExperienceStore(tmp_path / "exp", embedding="hash")
    _varied_store(store)
    store.close()
    shutil.rmtree(tmp_path / "exp" / "chroma" / "vectors")  # as an index built before vector files
    reopened = ExperienceStore(tmp_path / "exp", embedding="hash")
    assert {line.split(":")[0] for line in reopened.verify().lines()} == {"vectors missing"}
    filters = {"task_id": "task-1", "error_type": "none"}
    hits = reopened.search("run beta", filters=filters, k=5)
    assert [round(h.distance, 4) for h in hits] == _exact(reopened, "run beta", filters)
    assert reopened.index.vector_file_ids("steps") == reopened.index.ids("steps")
    reopened.search("run beta", scope="summaries", filters={"outcome": "passed"})
    assert reopened.verify().ok
    reopened.close()


def test_a_scan_scores_every_live_row_and_skips_replaced_and_dropped_ones(tmp_path: Path) -> None:
    from recreate.experience.vectors import smallest

    writer, reader = VectorFile(tmp_path / "c"), VectorFile(tmp_path / "c")
    writer.append(["a", "b", "c"], [[1, 0], [0, 1], [1, 1]])
    writer.append(["a"], [[-1, 0]])  # an upsert: the old row of "a" no longer counts
    writer.drop(["c"])
    distances, owners = reader.scan([1, 0])
    assert len(reader) == 2 and owners == [None, "b", None, "a"]
    assert np.isinf(distances[[0, 2]]).all() and distances[1:4:2] == pytest.approx([1.0, 2.0])
    order = smallest(distances, 10)
    assert [owners[r] for r in order] == ["b", "a"]  # the replaced and dropped rows never come back
    assert [owners[r] for r in smallest(distances, 1, start=1)] == ["a"]
