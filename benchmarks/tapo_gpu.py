"""Trainer step throughput and peak memory on a GPU: a random-init ~0.5B Qwen-shaped model, bf16, 4k tokens.

    python benchmarks/tapo_gpu.py                      # CUDA: tapo vs grpo, 4 × 4096-token traces
    python benchmarks/tapo_gpu.py --tiny --device cpu  # smoke run of the script itself (no GPU needed)

The model is built from a Qwen2-0.5B-shaped config (hidden 896, 24 layers, 14 heads / 2 KV heads,
MLP 4864, vocabulary 151,936; ~0.49B parameters) with random weights: nothing is downloaded. Weights
are bf16 (`--dtype bf16`, the trainer's `dtype`), gradient checkpointing on, log-probs chunked (the
trainer's path). One step = `accumulate_gradients` (forward, loss, backward over `--micro-batch`
sized micro-batches) + AdamW step, on synthetic agent traces whose model tokens are half of each
trace in two turns, behaviour log-probs 0.05 nats off the policy's. Reported per loss: median
tokens/s over `--steps` timed steps (after one warm-up step) and CUDA's peak allocated memory.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

QWEN_05B = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151_936,
    tie_word_embeddings=True,
)
TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=1024,
    tie_word_embeddings=True,
)


class OneProcess:
    """accelerate's process API for a single device (the trainer's collectives become no-ops)."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.process_index, self.num_processes = device, 0, 1

    def no_sync(self, model):
        from contextlib import nullcontext

        return nullcontext()

    def autocast(self):
        from contextlib import nullcontext

        return nullcontext()

    def backward(self, loss):
        loss.backward()

    def reduce(self, tensor, op):
        return tensor


def traces(count: int, tokens: int, vocab: int, seed: int = 0) -> list:
    from tapo_backend.data import Example

    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        ids = torch.randint(vocab, (tokens,), generator=gen).tolist()
        mask = [0] * tokens
        for begin, end in ((tokens // 4, tokens // 2), (3 * tokens // 4, tokens)):
            mask[begin:end] = [1] * (end - begin)
        out.append(
            Example(f"t{i}", f"g{i // 2}", float(i % 2), ids, mask, None, False, advantage=1.0 - 2 * (i % 2))
        )
    return out


def run(loss: str, args: argparse.Namespace) -> dict[str, float]:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from tapo_backend.config import TrainConfig
    from tapo_backend.logprobs import fill_logprobs
    from tapo_backend.trainer import accumulate_gradients

    device = torch.device(args.device)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    torch.manual_seed(0)
    shape = TINY if args.tiny else QWEN_05B
    model = Qwen2ForCausalLM(Qwen2Config(**shape, max_position_embeddings=args.tokens + 8)).to(device, dtype)
    model.config.use_cache = False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    params = sum(p.numel() for p in model.parameters())
    examples = traces(args.batch, args.tokens, shape["vocab_size"])
    accelerator = OneProcess(device)
    fill_logprobs(accelerator, model, examples, "iteration_logprobs", args.micro_batch, pad_id=0)
    for e in examples:  # stale behaviour: 0.05 nats off, so the ratios and σ are not trivially 1
        e.iteration_logprobs = [lp - 0.05 * (j % 3 - 1) for j, lp in enumerate(e.iteration_logprobs)]
    config = TrainConfig(algo=loss, micro_batch_size=args.micro_batch, output_dir="unused")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    rates = []
    for step in range(args.steps + 1):
        started = time.perf_counter()
        accumulate_gradients(accelerator, model, examples, config, pad_id=0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step:  # the first step warms up kernels and allocators
            rates.append(args.batch * args.tokens / (time.perf_counter() - started))
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    return {
        "loss": loss,
        "params_M": params / 1e6,
        "tokens_per_s": statistics.median(rates),
        "peak_gib": peak,
    }


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--tokens", type=int, help="tokens per trace (default 4096; --tiny 256)")
    ap.add_argument("--batch", type=int, default=4, help="traces per optimizer step")
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model: checks the script, not the GPU")
    ap.add_argument("--losses", nargs="+", default=["tapo", "grpo"])
    args = ap.parse_args(argv)
    args.tokens = args.tokens or (256 if args.tiny else 4096)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("tapo_gpu.py: no CUDA device here; run it on a GPU machine (or --tiny --device cpu)")
    rows = [run(loss, args) for loss in args.losses]
    print(
        f"{args.batch} × {args.tokens}-token traces, {args.dtype}, "
        f"micro-batch {args.micro_batch}, {args.device}:"
    )
    for row in rows:
        print(
            f"  {row['loss']:6s} {row['params_M']:7.1f}M params  {row['tokens_per_s']:9.0f} tokens/s  "
            f"peak {row['peak_gib']:.2f} GiB"
        )
    if len(rows) > 1:
        ratio = rows[0]["tokens_per_s"] / rows[1]["tokens_per_s"]
        print(f"  {rows[0]['loss']} / {rows[1]['loss']} tokens/s: {ratio:.3f}")
    return rows


if __name__ == "__main__":
    main()
