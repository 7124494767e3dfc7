"""Peak memory of the trainer's log-prob + loss step on one long agent trace: full logits vs chunked.

    python benchmarks/tapo_memory.py                 # 4096-token trace, vocab 32k (~1 min on 2 cores)
    python benchmarks/tapo_memory.py --tokens 1024   # smaller

Each mode runs in its own process: forward + `compute_policy_loss("tapo")` + backward of a random-init
Llama (hidden 256, 2 layers, vocabulary 32,000 — the head's logits dominate, as in real models whose
vocabulary is 32k–152k) on one trace of `--tokens` tokens, half of them model tokens. Peak memory =
the rise of the process's peak RSS (VmHWM, reset before the step) or of CUDA's peak allocation.
`full` is the pre-chunking path (the model's [B, T, V] logits, one float32 row at a time); `chunked`
swaps the output head for one that scores LOGPROB_CHUNK positions at a time and recomputes each chunk
in the backward pass.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch


def _reset_peak() -> None:
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS


def _peak_mb() -> float:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _rss_mb() -> float:
    if torch.cuda.is_available():
        return torch.cuda.memory_allocated() / 2**20
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one_mode(mode: str, tokens: int, vocab: int) -> dict[str, float]:
    from transformers import LlamaConfig, LlamaForCausalLM

    from tapo_backend.logprobs import LOGPROB_CHUNK, token_logprobs
    from tapo_backend.losses import compute_policy_loss

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=tokens + 1,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(device)
    model.config.use_cache = False
    ids = torch.randint(vocab, (1, tokens), device=device)
    mask = torch.zeros(1, tokens - 1, device=device)
    mask[:, tokens // 4 : tokens // 2] = 1  # two model turns between environment tokens
    mask[:, 3 * tokens // 4 :] = 1
    old = torch.full_like(mask, -2.0)
    adv = torch.ones(1, device=device)
    _reset_peak()
    before = _rss_mb()
    started = time.perf_counter()
    lps = token_logprobs(model, ids, torch.ones_like(ids), chunk=None if mode == "full" else LOGPROB_CHUNK)
    loss, _ = compute_policy_loss("tapo", lps, old, adv, mask)
    loss.backward()
    seconds = time.perf_counter() - started
    return {"mode": mode, "peak_rise_mb": _peak_mb() - before, "seconds": seconds, "loss": float(loss)}


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=32_000)
    ap.add_argument("--mode", choices=("full", "chunked"), help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args(argv)
    if args.mode:
        print(json.dumps(one_mode(args.mode, args.tokens, args.vocab)))
        return []
    rows = []
    for mode in ("full", "chunked"):
        cmd = [
            sys.executable,
            __file__,
            "--mode",
            mode,
            "--tokens",
            str(args.tokens),
            "--vocab",
            str(args.vocab),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    full, chunked = rows
    print(f"{args.tokens}-token trace, vocab {args.vocab}: peak memory rise of log-probs + loss + backward")
    for row in rows:
        print(
            f"  {row['mode']:8s} {row['peak_rise_mb']:8.0f} MB  {row['seconds']:6.2f} s  "
            f"loss {row['loss']:.6f}"
        )
    print(f"  chunked / full: memory {chunked['peak_rise_mb'] / full['peak_rise_mb']:.2f}x")
    return rows


if __name__ == "__main__":
    main()
