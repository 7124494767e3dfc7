"""One rank of the 2-process FSDP test (run by torch.distributed.run from test_trainer.py).

accelerate on CPU falls back to DDP even when FSDP is asked for, so this drives the trainer's own
`fill_logprobs` and `accumulate_gradients` on a model sharded with torch's `fully_shard` over gloo,
through a minimal stand-in for accelerate's process API. Every forward and backward of a sharded model
gathers parameters collectively: a rank that ran fewer micro-batches than the other would hang here.
Rank 0 writes the largest difference between the sharded gradient and a one-process gradient.
"""

from __future__ import annotations

import copy
import json
import sys
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from tapo_backend.config import TrainConfig
from tapo_backend.data import build_dataset
from tapo_backend.trainer import accumulate_gradients, fill_logprobs, load_model, load_tokenizer


class Processes:
    """accelerate's process API over torch.distributed (gloo, CPU)."""

    def __init__(self, rank: int, size: int) -> None:
        self.process_index, self.num_processes, self.device = rank, size, torch.device("cpu")

    def no_sync(self, model):
        return nullcontext()

    def autocast(self):
        return nullcontext()

    def backward(self, loss):
        loss.backward()

    def reduce(self, tensor, op):
        if self.num_processes > 1:
            dist.all_reduce(tensor)
        return tensor


def main(model_dir: str, logs: str, out: str) -> None:
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    tokenizer = load_tokenizer(model_dir)
    examples = build_dataset(logs, tokenizer).examples[:5]  # splits 3/2: 2 and 1 micro-batches of 2
    config = TrainConfig(micro_batch_size=2, output_dir="unused")
    torch.manual_seed(0)
    model = load_model(model_dir, config)
    reference = copy.deepcopy(model)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    pad = tokenizer.pad_token_id
    fill_logprobs(Processes(rank, size), model, examples, "iteration_logprobs", 2, pad)
    accumulate_gradients(Processes(rank, size), model, examples, config, pad)
    sharded = {name: p.grad.full_tensor() for name, p in model.named_parameters()}
    if rank == 0:
        single = copy.deepcopy(examples)
        fill_logprobs(Processes(0, 1), reference, single, "iteration_logprobs", 2, pad)
        logprob_gap = max(
            abs(a - b)
            for x, y in zip(examples, single, strict=True)
            for a, b in zip(x.iteration_logprobs, y.iteration_logprobs, strict=True)
        )
        accumulate_gradients(Processes(0, 1), reference, single, config, pad)
        grad_gap = max(float((sharded[n] - p.grad).abs().max()) for n, p in reference.named_parameters())
        scale = max(float(p.grad.abs().max()) for p in reference.parameters())
        with open(out, "w") as fh:
            json.dump({"grad_gap": grad_gap, "grad_scale": scale, "logprob_gap": logprob_gap}, fh)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
