"""The vector cache: a document embedded before costs no model call, and what it returns is exactly what
the model returned; the key names the embedding's weights; a broken file costs speed, not correctness."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from recreate.experience.embeddings import HashEmbedding, MiniLMEmbedding, fingerprint
from recreate.experience.store import ExperienceStore
from recreate.experience.vector_cache import VectorCache
from tests.experience.factory import bash_step, make_trajectory

DOCS = ["ls\nsolve.py", "python solve.py\n[exit 1] ZeroDivisionError", "ls\nsolve.py", "cat data.csv\na,b"]


class Counting:
    """The real hashing embedding, counting the documents it is asked to embed."""

    def __init__(self) -> None:
        self.embedding, self.calls = HashEmbedding(), []

    def __call__(self, docs: list[str]) -> list[np.ndarray]:
        self.calls.append(list(docs))
        return self.embedding(docs)


def test_each_distinct_document_is_embedded_once_and_the_vectors_are_the_models(tmp_path: Path) -> None:
    embed = Counting()
    cache = VectorCache(tmp_path / "vectors.sqlite", fingerprint(embed.embedding) or "")
    first = cache.embed(DOCS, embed)
    assert embed.calls == [[DOCS[0], DOCS[1], DOCS[3]]]  # the repeat inside the batch too
    assert np.array_equal(first, np.asarray(HashEmbedding()(DOCS)))
    again = cache.embed([DOCS[3], "a new step", DOCS[1]], embed)
    assert embed.calls[1:] == [["a new step"]]
    assert np.array_equal(again, np.asarray(HashEmbedding()([DOCS[3], "a new step", DOCS[1]])))
    assert (cache.hits, cache.misses) == (3, 4)
    cache.close()


def test_the_cache_outlives_the_process_that_wrote_it_and_is_keyed_by_the_fingerprint(tmp_path: Path) -> None:
    path = tmp_path / "vectors.sqlite"
    writer = VectorCache(path, "recreate-hash:1:384")
    writer.embed(DOCS, Counting())
    writer.close()
    reader, embed = VectorCache(path, "recreate-hash:1:384"), Counting()
    assert np.array_equal(reader.embed(DOCS, embed), np.asarray(HashEmbedding()(DOCS)))
    assert embed.calls == []
    other = Counting()
    VectorCache(path, "recreate-hash:1:128").embed(DOCS, other)  # other weights: nothing is shared
    assert other.calls == [[DOCS[0], DOCS[1], DOCS[3]]]


def test_a_broken_file_is_reported_once_and_the_documents_are_embedded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "vectors.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    cache, embed = VectorCache(path, "f"), Counting()
    with caplog.at_level(logging.WARNING):
        first = cache.embed(DOCS, embed)
        second = cache.embed(DOCS, embed)
    assert np.array_equal(first, np.asarray(HashEmbedding()(DOCS))) and np.array_equal(first, second)
    assert len(embed.calls) == 2
    warnings = [r.getMessage() for r in caplog.records if "embedding cache" in r.getMessage()]
    assert len(warnings) == 1 and "delete the file" in warnings[0]


def test_held_rows_of_another_shape_are_recomputed_and_replaced(tmp_path: Path) -> None:
    path = tmp_path / "vectors.sqlite"
    cache = VectorCache(path, "f")
    cache.embed(DOCS[:1], Counting())
    with sqlite3.connect(path) as db:  # as a damaged row would be
        db.execute("UPDATE vectors SET vector = ?", (np.zeros(7, dtype=np.float32).tobytes(),))
    embed = Counting()
    got = cache.embed(DOCS, embed)
    assert np.array_equal(got, np.asarray(HashEmbedding()(DOCS)))
    assert embed.calls[-1] == [DOCS[0], DOCS[1], DOCS[3]]
    assert np.array_equal(cache.embed(DOCS[:1], Counting()), got[:1])  # the row was replaced


def test_a_row_that_is_not_whole_float32s_or_differs_in_shape_is_recomputed_and_replaced(
    tmp_path: Path,
) -> None:
    path = tmp_path / "vectors.sqlite"
    cache = VectorCache(path, "f")
    cache.embed(DOCS, Counting())
    with sqlite3.connect(path) as db:  # as damaged rows would be: one cut mid-value, one of 7 values
        first, second = [row[0] for row in db.execute("SELECT key FROM vectors ORDER BY key LIMIT 2")]
        db.execute("UPDATE vectors SET vector = ? WHERE key = ?", (b"\x00" * 5, first))
        db.execute("UPDATE vectors SET vector = ? WHERE key = ?", (np.zeros(7, np.float32).tobytes(), second))
    for _ in range(2):  # was a ValueError (the cut row), then every call recomputed (the mixed shapes)
        embed = Counting()
        assert np.array_equal(cache.embed(DOCS, embed), np.asarray(HashEmbedding()(DOCS)))
    assert embed.calls == []  # replaced by the first call
    cache.close()


def test_a_cache_whose_folder_cannot_be_made_is_reported_and_the_documents_embedded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "a-file").write_text("")
    cache, embed = VectorCache(tmp_path / "a-file" / "vectors.sqlite", "f"), Counting()
    with caplog.at_level(logging.WARNING):
        assert np.array_equal(cache.embed(DOCS, embed), np.asarray(HashEmbedding()(DOCS)))
        assert np.array_equal(cache.embed(DOCS, embed), np.asarray(HashEmbedding()(DOCS)))
    assert len(embed.calls) == 2
    assert sum("embedding cache" in r.getMessage() for r in caplog.records) == 1


def test_only_embeddings_that_name_their_weights_have_a_fingerprint(minilm_models: Path) -> None:
    assert fingerprint(HashEmbedding(dim=64)) != fingerprint(HashEmbedding())
    assert fingerprint(lambda docs: docs) is None  # type: ignore[arg-type]
    fp32 = fingerprint(MiniLMEmbedding(runtime="onnx-fp32", cache_dir=minilm_models))
    assert fp32 and fp32 == fingerprint(
        MiniLMEmbedding(runtime="onnx-fp32", cache_dir=minilm_models, threads=2)
    )
    assert fp32 != fingerprint(MiniLMEmbedding(runtime="torch", cache_dir=minilm_models))


class CountingHash(HashEmbedding):
    """The hashing embedding (same name, same vectors), recording each document it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.embedded: list[str] = []

    def __call__(self, input: list[str]) -> list[np.ndarray]:  # type: ignore[override]
        self.embedded += list(input)
        return super().__call__(input)


def _runs() -> list:
    """Three runs of one task whose first two steps are the same (as runs of one scaffold often are)."""
    shared = [bash_step(0, "ls", stdout="solve.py data.csv"), bash_step(1, "cat data.csv", stdout="a,b\n1,2")]
    return [
        make_trajectory(f"t-{n}", steps=[*shared, bash_step(2, f"python solve.py --try {n}", stdout=f"{n}")])
        for n in range(3)
    ]


def test_the_store_embeds_a_repeated_step_once_and_a_reindex_embeds_nothing(tmp_path: Path) -> None:
    embed = CountingHash()
    store = ExperienceStore(tmp_path / "experience", embedding=embed)
    store.ingest(_runs())
    steps = [doc for doc in embed.embedded if not doc.startswith("task ")]  # not the run summaries
    assert len(embed.embedded) == len(set(embed.embedded))  # no document embedded twice
    assert len(steps) == 2 + 3  # the shared steps once, then one per run
    before = store.search("list the files", k=3)
    embed.embedded.clear()
    report = store.reindex()
    assert report.added and embed.embedded == []  # every document's vector was held
    after = store.search("list the files", k=3)
    assert [(h.id, h.distance) for h in after] == [(h.id, h.distance) for h in before]
    store.close()


def test_the_cache_is_a_store_option_and_search_is_the_same_without_it(tmp_path: Path) -> None:
    plain_embed = CountingHash()
    plain = ExperienceStore(tmp_path / "plain", embedding=plain_embed, vector_cache=False)
    cached = ExperienceStore(tmp_path / "cached", embedding=CountingHash())
    for store in (plain, cached):
        store.ingest(_runs())
    assert not (tmp_path / "plain" / "vector-cache.sqlite").exists()
    assert (tmp_path / "cached" / "vector-cache.sqlite").exists()
    assert len(plain_embed.embedded) > len(set(plain_embed.embedded))  # the shared steps, once per run
    for query in ("list the files", "read the csv", "run the solution"):
        got = [[(h.id, round(h.distance, 6)) for h in s.search(query, k=5)] for s in (plain, cached)]
        assert got[0] == got[1]
    plain.close()
    cached.close()


def test_the_fingerprint_is_of_the_weights_this_process_loaded(minilm_models: Path, tmp_path: Path) -> None:
    import shutil

    from recreate.experience import embeddings, minilm_onnx

    models = tmp_path / "models"
    shutil.copytree(minilm_models, models)
    loaded = MiniLMEmbedding(runtime="onnx-fp32", cache_dir=models)
    before = fingerprint(loaded)
    int8 = minilm_onnx.export(models, "int8")
    shutil.copyfile(int8, models / "all-MiniLM-L6-v2-fp32.onnx")  # replaced under the running process
    assert fingerprint(loaded) == before  # still what this process computes with
    for key in [k for k in embeddings._models if k[2] == str(models)]:
        del embeddings._models[key]  # as a new process would load it
    assert fingerprint(MiniLMEmbedding(runtime="onnx-fp32", cache_dir=models)) != before
