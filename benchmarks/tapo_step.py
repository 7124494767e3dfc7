"""TAPO step cost: the loss against GRPO's, and the trainer against TRL's GRPOTrainer.

    python benchmarks/tapo_step.py            # full sizes (a few minutes on 2 CPU cores)
    python benchmarks/tapo_step.py --quick    # small sizes, a smoke run

1. Loss: forward + backward of `compute_policy_loss` on random [B, T] log-probs (half the tokens model
   tokens, stale behaviour), tapo vs grpo (and dapo, cumprod), interleaved repeats, median and minimum
   CPU time (process time: on a shared machine it is far less disturbed by other processes than wall
   time, especially with one torch thread, the default). Target: tapo <= 1.15x grpo.
2. Trainer: one optimizer step (forward, backward, clip, AdamW) on the same tiny Llama and the same
   batch (prompt tokens masked out, completion tokens trained), our `accumulate_gradients` loop vs TRL's
   GRPOTrainer.compute_loss (generation excluded: TRL's step is fed the same prepared batch). Each side
   runs in its own process; peak memory = the rise of the process's peak RSS (VmHWM, reset before the
   steps) or of CUDA's peak allocation on a GPU. Wall and CPU time per step are both reported.
   Targets: tokens/s >= 1.0x TRL, peak memory <= 1.0x TRL.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

SIZES = {
    "full": {
        "loss": (32, 4096),
        "model": (256, 4, 4, 8192),
        "batch": (8, 128, 384),
        "steps": 4,
        "rounds": 3,
        "loss_repeats": 30,
    },
    "quick": {
        "loss": (8, 512),
        "model": (128, 2, 4, 1024),
        "batch": (4, 32, 96),
        "steps": 2,
        "rounds": 1,
        "loss_repeats": 5,
    },
}
SIDES = ("trl", "grpo", "tapo")


# -- 1. loss time ------------------------------------------------------------------------------------


def loss_times(batch: int, width: int, repeats: int = 15) -> dict[str, list[float]]:
    from tapo_backend.losses import compute_policy_loss

    generator = torch.Generator().manual_seed(0)
    old = -torch.rand(batch, width, generator=generator) * 3
    current = (old + torch.randn(batch, width, generator=generator) * 0.2).requires_grad_(True)
    mask = (torch.rand(batch, width, generator=generator) < 0.5).float()
    advantages = torch.randn(batch, generator=generator)
    names = ["grpo", "tapo", "dapo", "cumprod"]
    times: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(repeats + 2):
        for name in names:  # interleaved, so load on the machine hits every loss alike
            started = time.process_time()  # CPU time: robust to other processes loading the machine
            loss, _ = compute_policy_loss(name, current, old, advantages, mask)
            loss.backward()
            current.grad = None
            if repeat >= 2:
                times[name].append(time.process_time() - started)
    return times


# -- 2. trainer step vs TRL --------------------------------------------------------------------------


def _peak_reset() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS


def _memory_now() -> tuple[int, int]:
    """(current, peak) bytes: CUDA allocations on a GPU, else the process's RSS and peak RSS."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(status["VmRSS"].split()[0]) * 1024, int(status["VmHWM"].split()[0]) * 1024


def _tiny_model(directory: Path, hidden: int, layers: int, heads: int, vocab: int) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=4096,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(directory)


def _batch(batch: int, prompt: int, completion: int, vocab: int) -> torch.Tensor:
    return torch.randint(3, vocab, (batch, prompt + completion), generator=torch.Generator().manual_seed(1))


def worker(side: str, model_dir: str, sizes: dict) -> dict[str, list[float] | float]:
    """One side's steady-state step time and peak memory, run in a fresh process."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    batch, prompt, completion = sizes["batch"]
    vocab = sizes["model"][3]
    ids = _batch(batch, prompt, completion, vocab).to(device)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    model.config.use_cache = False
    advantages = torch.linspace(-1, 1, batch, device=device)
    step = (
        _ours(model, ids, prompt, advantages, side) if side != "trl" else _trl(model, ids, prompt, advantages)
    )
    step()  # warm-up (optimizer state, allocator)
    before, _ = _memory_now()
    _peak_reset()
    times, cpu_times = [], []
    for _ in range(sizes["steps"]):
        started, started_cpu = time.perf_counter(), time.process_time()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
        cpu_times.append(time.process_time() - started_cpu)
    _, peak = _memory_now()
    return {
        "step_s": times,
        "cpu_s": cpu_times,
        "tokens": ids.numel(),
        "peak_rise_mb": (peak - before) / 2**20,
    }


def _ours(model, ids: torch.Tensor, prompt: int, advantages: torch.Tensor, algo: str):
    from accelerate import Accelerator

    from tapo_backend.config import TrainConfig
    from tapo_backend.data import Example
    from tapo_backend.trainer import accumulate_gradients, fill_logprobs

    accelerator = Accelerator()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    model, optimizer = accelerator.prepare(model, optimizer)
    width = ids.shape[1]
    examples = [
        Example(
            trajectory_id=str(i),
            group="g",
            reward=0.0,
            input_ids=row.tolist(),
            mask=[0] * prompt + [1] * (width - prompt),
            behaviour_logprobs=None,
            token_in_token_out=False,
            advantage=float(advantages[i]),
        )
        for i, row in enumerate(ids.cpu())
    ]
    fill_logprobs(accelerator, model, examples, "iteration_logprobs", len(examples), pad_id=0)
    config = TrainConfig(algo=algo, micro_batch_size=len(examples), run_name="bench", output_dir="unused")

    def step() -> None:
        accumulate_gradients(accelerator, model, examples, config, pad_id=0)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _trl(model, ids: torch.Tensor, prompt: int, advantages: torch.Tensor):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for the test tokenizer
    from tests.tapo_backend.conftest import make_tokenizer

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=ids.shape[0],
        num_generations=ids.shape[0],
        max_completion_length=ids.shape[1] - prompt,
        loss_type="grpo",
        beta=0.0,
        bf16=False,
        gradient_checkpointing=False,
        report_to=[],
        use_cpu=not torch.cuda.is_available(),
        max_grad_norm=1.0,
        learning_rate=1e-6,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["hi"] * ids.shape[0]}),
        processing_class=make_tokenizer(),
    )
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's own loop, which we bypass
    model = trainer.model
    model.train()
    inputs = {
        "prompt_ids": ids[:, :prompt],
        "prompt_mask": torch.ones_like(ids[:, :prompt]),
        "completion_ids": ids[:, prompt:],
        "completion_mask": torch.ones_like(ids[:, prompt:]),
        "advantages": advantages,
        "num_items_in_batch": torch.tensor(float(ids[:, prompt:].numel())),
    }

    def step() -> None:
        loss = trainer.compute_loss(model, inputs)
        trainer.accelerator.backward(loss)
        trainer.accelerator.clip_grad_norm_(model.parameters(), 1.0)
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)

    return step


# -- report ------------------------------------------------------------------------------------------


def report_loss(console: Console, sizes: dict, device: str) -> dict[str, float]:
    batch, width = sizes["loss"]
    times = loss_times(batch, width, repeats=sizes["loss_repeats"])
    median = {name: statistics.median(values) for name, values in times.items()}
    best = {name: min(values) for name, values in times.items()}  # the least disturbed by machine load
    table = Table(title=f"policy loss, forward+backward, B={batch} T={width} ({device})")
    for column in ("loss", "median CPU ms", "vs grpo", "min CPU ms", "vs grpo"):
        table.add_column(column)
    for name in times:
        table.add_row(
            name,
            f"{median[name] * 1e3:.2f}",
            f"{median[name] / median['grpo']:.2f}x",
            f"{best[name] * 1e3:.2f}",
            f"{best[name] / best['grpo']:.2f}x",
        )
    console.print(table)
    return {f"{name}_median": median[name] * 1e3 for name in times} | {
        f"{n}_min": best[n] * 1e3 for n in times
    }


def report_trainer(console: Console, sizes: dict, device: str, threads: int, quick: bool) -> dict[str, dict]:
    hidden, layers, heads, vocab = sizes["model"]
    batch, prompt, completion = sizes["batch"]
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as tmp:
        _tiny_model(Path(tmp), hidden, layers, heads, vocab)
        for _ in range(sizes["rounds"]):  # rounds of every side in turn, so machine load hits all alike
            for side in SIDES:
                command = [sys.executable, __file__, "--worker", side, tmp, "--threads", str(threads)]
                command += ["--quick"] if quick else []
                done = subprocess.run(
                    command, capture_output=True, text=True, check=False, cwd=Path(__file__).parents[1]
                )
                if done.returncode != 0:
                    raise SystemExit(f"{side} worker failed:\n{done.stderr[-3000:]}")
                runs[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
    results = {}
    for side, side_runs in runs.items():
        step_s = statistics.median(t for run in side_runs for t in run["step_s"])
        results[side] = {
            "step_s": step_s,
            "cpu_s": statistics.median(t for run in side_runs for t in run["cpu_s"]),
            "tokens_per_s": side_runs[0]["tokens"] / step_s,
            "peak_rise_mb": statistics.median(run["peak_rise_mb"] for run in side_runs),
        }
    title = (
        f"optimizer step: Llama {layers}x{hidden}, vocab {vocab}; batch {batch} x ({prompt} prompt + "
        f"{completion} trained tokens), fp32 ({device})"
    )
    table = Table(title=title)
    columns = (
        "trainer",
        "step s",
        "tokens/s",
        "vs TRL",
        "CPU s/step",
        "vs TRL",
        "peak memory rise MiB",
        "vs TRL",
    )
    for column in columns:
        table.add_column(column)
    base = results["trl"]
    labels = {"trl": "TRL GRPOTrainer (grpo)", "grpo": "tapo_backend grpo", "tapo": "tapo_backend tapo"}
    for side, row in results.items():
        table.add_row(
            labels[side],
            f"{row['step_s']:.3f}",
            f"{row['tokens_per_s']:.0f}",
            f"{row['tokens_per_s'] / base['tokens_per_s']:.2f}x",
            f"{row['cpu_s']:.3f}",
            f"{base['cpu_s'] / row['cpu_s']:.2f}x",
            f"{row['peak_rise_mb']:.0f}",
            f"{row['peak_rise_mb'] / base['peak_rise_mb']:.2f}x",
        )
    console.print(table)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--only", choices=("loss", "trainer"), help="run one of the two parts")
    parser.add_argument("--worker", nargs=2, metavar=("SIDE", "MODEL_DIR"), help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: least disturbed by load)")
    options = parser.parse_args()
    sizes = SIZES["quick" if options.quick else "full"]
    torch.set_num_threads(options.threads)
    if options.worker:
        print(json.dumps(worker(options.worker[0], options.worker[1], sizes)))
        return
    console = Console(width=150)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU, {options.threads} threads"
    figures = {}
    if options.only != "trainer":
        figures["loss_ms"] = report_loss(console, sizes, device)
    if options.only != "loss":
        figures["trainer"] = report_trainer(console, sizes, device, options.threads, options.quick)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
