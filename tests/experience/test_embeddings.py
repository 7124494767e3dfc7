"""MiniLM through ONNX Runtime: exported once, the torch model's vectors, quiet and reusable."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recreate.experience import minilm_onnx
from recreate.experience.embeddings import HashEmbedding, MiniLMEmbedding, fingerprint
from recreate.experience.store import ExperienceStore
from tests.experience.factory import make_trajectory

TEXTS = [
    "python -c 'import numpy'\n[exit 1]\nModuleNotFoundError: No module named 'numpy'",
    "ls",
    "cat src/module_3.py\n" + "def fn(x):\n    return x * 2\n" * 80,  # past the 256-token cut
    "ls",  # a repeat: embedded once, the same vector
]


@pytest.mark.slow
def test_onnx_minilm_gives_the_torch_models_vectors(minilm_models: Path) -> None:
    exported = minilm_models / "all-MiniLM-L6-v2-fp32.onnx"
    stamp = exported.stat().st_mtime_ns
    onnx = np.asarray(MiniLMEmbedding(runtime="onnx-fp32", cache_dir=minilm_models)(TEXTS))
    torch = np.asarray(MiniLMEmbedding(runtime="torch")(TEXTS))
    assert onnx.shape == (4, 384) and np.allclose(np.linalg.norm(onnx, axis=1), 1.0, atol=1e-5)
    assert np.min(np.sum(onnx * torch, axis=1)) > 0.9999
    assert np.array_equal(onnx[1], onnx[3])
    assert minilm_onnx.export(minilm_models, "fp32") == exported
    assert exported.stat().st_mtime_ns == stamp  # exported once, reused


def test_a_runtime_is_checked_and_old_persisted_configs_still_load() -> None:
    with pytest.raises(ValueError, match="unknown MiniLM runtime 'gpu'; choose one of onnx-int8, onnx-fp32"):
        MiniLMEmbedding(runtime="gpu")
    old = MiniLMEmbedding.build_from_config({"device": "cpu"})  # as indexes built before runtimes persisted
    assert old.runtime == "onnx-fp32" and old.get_config() == {"device": "cpu", "runtime": "onnx-fp32"}
    with pytest.raises(ValueError, match="unknown MiniLM variant"):
        minilm_onnx.export(Path("unused"), "int4")


@pytest.mark.slow
def test_threads_choose_the_runtimes_threads_and_not_the_vectors(minilm_models: Path) -> None:
    from recreate.experience.embeddings import _model, make_embedding

    default = MiniLMEmbedding(cache_dir=minilm_models)
    bulk = MiniLMEmbedding(cache_dir=minilm_models, threads=2)
    assert np.array_equal(np.asarray(default(TEXTS)), np.asarray(bulk(TEXTS)))
    for threads, expected in ((2, 2), (None, minilm_onnx.default_threads())):
        options = _model("onnx-fp32", "cpu", minilm_models, threads)[0].session.get_session_options()
        assert options.intra_op_num_threads == expected
    assert make_embedding("minilm", threads=3).threads == 3
    assert bulk.get_config() == default.get_config()  # an index does not record how it was built


class PrefixedHash(HashEmbedding):
    """A user's own variant of a built-in: other vectors, under a name of its own."""

    def __call__(self, input: list[str]) -> list[np.ndarray]:  # type: ignore[override]
        return super().__call__([f"passage: {text} with more words" for text in input])

    @staticmethod
    def name() -> str:
        return "prefixed-hash"


def test_a_subclass_under_its_own_name_never_gets_its_parents_cached_vectors(tmp_path: Path) -> None:
    assert fingerprint(PrefixedHash()) != fingerprint(HashEmbedding())
    root = tmp_path / "experience"
    with ExperienceStore(root, embedding=HashEmbedding()) as store:
        store.ingest([make_trajectory("t-1")])
    with ExperienceStore(root, embedding=PrefixedHash()) as store:  # the same home, another embedding
        store.reindex()
        held = store.index.collection("steps").get(include=["embeddings", "documents"])
        assert np.allclose(np.asarray(held["embeddings"]), np.asarray(PrefixedHash()(held["documents"])))
