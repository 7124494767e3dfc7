"""MiniLM as a user gets it, side by side in one process on the same documents:

1. the runtimes: embed docs/s, store ingest steps/s (the vector cache off, so the model is measured),
   query latency, and recall@10 against the fp32 torch model's own exact neighbours;
2. how close fp32 MiniLM runs to this CPU's fp32 peak (a matrix product through the same kernels):
   the bound on any runtime that computes the same vectors;
3. the vector cache (on by default): store ingest on a corpus with no repeats, a re-index of it, and
   real agent logs (`--logs DIR`, trajectory JSON files, e.g. `.recreate/experience/trajectories`),
   each against the torch model and the ONNX model without the cache.

    python benchmarks/embedding.py --docs 800
    python benchmarks/embedding.py --docs 800 --logs .recreate/experience/trajectories

Every ratio is against the torch model measured in the same run; the load average is printed, since a
shared 2-core machine moves the absolute figures but not the ratios.

Measured 2026-12-05 (2 cores, load 1.5, `--docs 800 --logs` of the embedded model's main-job run):
store ingest steps/s torch 64.3, onnx-fp32 half the cores 49.1 (0.76x), all cores 89.0 (1.38x), int8
182.8 (2.84x, but recall@10 0.60 of torch's neighbours); fp32 MiniLM computes 169 GFLOP/s, 76% of the
221 GFLOP/s of a plain fp32 product (so at most 1.31x more for the same vectors); the cache: no repeats
86.0 (1.32x), re-index 1,343 (19x), real logs (87% repeated documents) 254.5 (3.87x; onnx alone 3.89x,
since it embeds a repeat within one batch once and torch does not).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from experience import QUERIES, percentile, synthetic_trajectory
from rich.console import Console
from rich.table import Table

from recreate.experience import minilm_onnx
from recreate.experience.documents import step_documents
from recreate.experience.embeddings import MiniLMEmbedding
from recreate.experience.schema import SchemaError, Trajectory, load_trajectory
from recreate.experience.store import ExperienceStore

console = Console(width=150)
MODELS = Path(tempfile.gettempdir()) / "recreate-bench-models"
ALL = os.cpu_count() or 1
RUNTIMES = (  # (label, runtime, threads): None = the default, half the cores (indexing beside rollouts)
    ("torch (sentence-transformers)", "torch", None),
    ("onnx-fp32, half the cores (default)", "onnx-fp32", None),
    ("onnx-fp32, all cores (import)", "onnx-fp32", ALL),
    ("onnx-int8, all cores", "onnx-int8", ALL),
)


def generated(count: int) -> list[Trajectory]:
    """Near-duplicate agent steps, every document distinct (20 steps a trajectory)."""
    rng = random.Random(1)
    return [synthetic_trajectory(n, 20, rng) for n in range((count + 19) // 20)]


def from_logs(folder: Path) -> list[Trajectory]:
    trajectories = []
    for path in sorted(folder.rglob("*.json")):
        try:
            trajectories.append(load_trajectory(path))
        except (SchemaError, OSError, ValueError):
            continue
    return trajectories


def documents(trajectories: list[Trajectory]) -> list[str]:
    return [doc for traj in trajectories for doc in step_documents(traj)[1]]


def ingest_rate(
    trajectories: list[Trajectory], embed: MiniLMEmbedding, *, vector_cache: bool, reindex: bool = False
) -> float:
    """Store steps/s, ingesting as an evolve run does (a few runs at a time); with `reindex`, the rate
    of rebuilding the index of that store afterwards."""
    steps = sum(len(t.steps) for t in trajectories)
    root = Path(tempfile.mkdtemp(prefix="emb-bench-"))
    try:
        store = ExperienceStore(root, embedding=embed, vector_cache=vector_cache)
        start = time.perf_counter()
        for first in range(0, len(trajectories), 10):
            store.ingest(trajectories[first : first + 10])
        seconds = time.perf_counter() - start
        if reindex:
            start = time.perf_counter()
            store.reindex()
            seconds = time.perf_counter() - start
        store.close()
        return steps / seconds
    finally:
        shutil.rmtree(root, ignore_errors=True)


def runtimes(trajectories: list[Trajectory], docs: list[str]) -> float:
    """Table 1; returns the all-cores fp32 ONNX model's docs/s (for the peak comparison)."""
    queries = [f"{QUERIES[m % len(QUERIES)]} {m}" for m in range(40)]
    table = Table(title=f"all-MiniLM-L6-v2 on {len(docs)} step documents, {ALL} CPUs")
    for column in (
        "runtime",
        "embed docs/s",
        "store steps/s",
        "query p50",
        "query p95",
        "recall@10 vs torch",
    ):
        table.add_column(column, justify="right")
    reference, baseline, fp32_all = None, None, 0.0
    for label, runtime, threads in RUNTIMES:
        embed = MiniLMEmbedding(runtime=runtime, cache_dir=MODELS, threads=threads)
        embed(docs[:8])  # load (and export once) outside the timing
        start = time.perf_counter()
        vectors = np.asarray(embed(docs))
        rate = len(docs) / (time.perf_counter() - start)
        fp32_all = rate if (runtime, threads) == ("onnx-fp32", ALL) else fp32_all
        store_rate = ingest_rate(trajectories, embed, vector_cache=False)
        baseline = baseline or store_rate
        latencies, query_vectors = [], []
        for query in queries:
            start = time.perf_counter()
            query_vectors.append(embed([query])[0])
            latencies.append((time.perf_counter() - start) * 1000)
        if reference is None:
            reference = (vectors, np.asarray(query_vectors))
        recalls = []
        for query, truth_query in zip(query_vectors, reference[1], strict=True):
            truth = reference[0] @ truth_query
            got = np.argsort(-(vectors @ query))[:10]
            recalls.append(float(np.mean(truth[got] >= np.sort(truth)[-10] - 1e-6)))
        table.add_row(
            label,
            f"{rate:.1f}",
            f"{store_rate:.1f} ({store_rate / baseline:.2f}x)",
            f"{percentile(latencies, 50):.1f} ms",
            f"{percentile(latencies, 95):.1f} ms",
            f"{np.mean(recalls):.3f} (worst {min(recalls):.2f})",
        )
    console.print(table)
    return fp32_all


def gemm_peak(threads: int) -> float:
    """GFLOP/s of an fp32 [1280 x 384] @ [384 x 1536] product (MiniLM's feed-forward shape at a batch of
    16 x 80 tokens) through ONNX Runtime's CPU kernels, best of 5 rounds."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    m, k, n = 1280, 384, 1536
    weight = numpy_helper.from_array(np.random.default_rng(0).random((k, n), dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).random((m, k), dtype=np.float32)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(20):
            session.run(None, {"x": x})
        best = min(best, (time.perf_counter() - start) / 20)
    return 2 * m * k * n / best / 1e9


def minilm_flops(docs: list[str]) -> float:
    """FLOPs of MiniLM's transformer layers over `docs` as the runtime cuts them (no padding)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(minilm_onnx.weights_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(minilm_onnx.MAX_TOKENS)
    d, ff, layers = 384, 1536, 6
    total = 0.0
    for encoding in tokenizer.encode_batch(docs):
        tokens = len(encoding.ids)
        per_layer = 2 * tokens * (4 * d * d + 2 * d * ff) + 2 * 2 * tokens * tokens * d  # dense + attention
        total += layers * per_layer
    return total


def peak(docs: list[str], fp32_rate: float) -> None:
    achieved = minilm_flops(docs) / len(docs) * fp32_rate / 1e9
    gemm = gemm_peak(ALL)
    console.print(
        f"fp32 MiniLM (ONNX, {ALL} threads) computes {achieved:.0f} GFLOP/s; a plain fp32 matrix product "
        f"through the same kernels reaches {gemm:.0f} GFLOP/s: MiniLM runs at {achieved / gemm:.0%} of it, "
        f"so a runtime computing the same vectors can be at most {gemm / achieved:.2f}x faster here."
    )


def cache_rows(corpora: dict[str, list[Trajectory]]) -> None:
    """Table 3: the vector cache against torch and against the ONNX model alone."""
    table = Table(title="store ingest steps/s: the vector cache (default) vs the model alone")
    for column in ("corpus", "steps", "repeated docs", "torch", "onnx-fp32", "onnx-fp32 + cache"):
        table.add_column(column, justify="right")
    torch = MiniLMEmbedding(runtime="torch", cache_dir=MODELS)
    onnx = MiniLMEmbedding(runtime="onnx-fp32", cache_dir=MODELS, threads=ALL)
    for embed in (torch, onnx):
        embed(["warm up"])
    for label, trajectories in corpora.items():
        docs = documents(trajectories)
        repeated = 1 - len(set(docs)) / max(len(docs), 1)
        reindex = label.startswith("re-index")
        rates: list[float] = []
        runs: list[tuple[MiniLMEmbedding, bool]] = [(torch, False), (onnx, False), (onnx, True)]
        for embed, cached in runs:
            rates.append(ingest_rate(trajectories, embed, vector_cache=cached, reindex=reindex))
        cells = [f"{rate:.1f} ({rate / rates[0]:.2f}x)" for rate in rates]
        table.add_row(label, str(len(docs)), f"{repeated:.0%}", *cells)
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=800, help="generated step documents (default 800)")
    parser.add_argument("--logs", type=Path, help="a folder of trajectory JSON files (real agent logs)")
    args = parser.parse_args()
    trajectories = generated(args.docs)
    docs = documents(trajectories)
    console.print(f"{ALL} CPUs, load average at start {os.getloadavg()[0]:.1f}")
    fp32_rate = runtimes(trajectories, docs)
    peak(docs, fp32_rate)
    corpora: dict[str, list[Trajectory]] = {
        "generated (no repeats)": trajectories,
        "re-index of the generated store": trajectories,
    }
    if args.logs:
        corpora[f"real logs ({args.logs})"] = from_logs(args.logs)
    cache_rows(corpora)
    console.print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
