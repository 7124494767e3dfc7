"""Per-token log-probs of a causal LM without materialising the full-vocabulary logits of a micro-batch.

`token_logprobs` runs the model's own forward (so FSDP/ZeRO-3 gather the parameters as usual) with its
output head swapped, for that one call, for a function that scores the target tokens a chunk of
positions at a time: each chunk's [B, chunk, V] logits exist only while that chunk is scored, and under
autograd each chunk is recomputed in the backward pass (activation checkpointing) instead of being kept.
Peak memory for the head drops from B·T·V floats to B·chunk·V (measured in benchmarks/tapo_memory.py).

`fill_logprobs` takes the behaviour (or reference) log-probs the logs lack, split across processes:
every process scores its share in the same number of forward calls (a collective under FSDP/ZeRO-3),
then the results are exchanged so every process holds all of them.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

LOGPROB_CHUNK = 1024  # positions per chunk of the output head


def output_head(model: torch.nn.Module) -> torch.nn.Module | None:
    """The module that maps hidden states to vocabulary logits (through DDP/FSDP/peft wrappers)."""
    inner = model
    while hasattr(inner, "module") and isinstance(inner.module, torch.nn.Module):
        inner = inner.module
    get = getattr(inner, "get_output_embeddings", None)
    return get() if callable(get) else None


def _chunk_logprobs(head: Any, hidden: Tensor, targets: Tensor, temperature: Tensor) -> Tensor:
    logits = head(hidden).float() / temperature
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


@contextmanager
def _scoring_head(head: torch.nn.Module, targets: Tensor, temperature: Tensor, chunk: int, out: list[Tensor]):
    """Make `head` return the target log-probs [B, N-1] of its N input positions (the last has no target)."""
    original = head.forward

    def scored(hidden: Tensor) -> Tensor:
        hidden = hidden[:, :-1]
        parts = []
        for begin in range(0, hidden.shape[1], chunk):
            args = (
                original,
                hidden[:, begin : begin + chunk],
                targets[:, begin : begin + chunk],
                temperature,
            )
            if torch.is_grad_enabled():
                parts.append(checkpoint(_chunk_logprobs, *args, use_reentrant=False))
            else:
                parts.append(_chunk_logprobs(*args))
        out.append(
            torch.cat(parts, dim=1) if parts else hidden.new_zeros(hidden.shape[:2], dtype=torch.float32)
        )
        return out[-1]

    head.forward = scored
    try:
        yield
    finally:
        del head.forward  # back to the class's forward


def token_logprobs(
    model: torch.nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    start: int = 0,
    temperature: float | Tensor = 1.0,
    chunk: int | None = LOGPROB_CHUNK,
) -> Tensor:
    """[B, T-1] float32: log p(input_ids[:, t+1] | input_ids[:, :t+1]), 0 before position `start`,
    with p = softmax(logits / temperature): the distribution the logged tokens were sampled from.
    `temperature` is one number or one per row [B].

    Logits are only made from `start` on (the shared prompt before the first model token needs none),
    `chunk` positions at a time (None: all at once, through the model's own logits).
    """
    width = input_ids.shape[1]
    targets = input_ids[:, start + 1 :]
    temps = torch.as_tensor(temperature, dtype=torch.float32, device=input_ids.device)
    temps = temps.reshape(-1, 1, 1).expand(len(input_ids), 1, 1) if temps.dim() else temps
    head = output_head(model) if chunk else None
    if head is None:
        logits = model(
            input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=width - start
        ).logits
        rows = [  # one row at a time bounds the float32 copy
            _chunk_logprobs(
                torch.nn.Identity(),
                logits[i : i + 1, :-1],
                targets[i : i + 1],
                temps[i] if temps.dim() else temps,
            )
            for i in range(len(logits))
        ]
        return torch.nn.functional.pad(torch.cat(rows), (start, 0))
    out: list[Tensor] = []
    with _scoring_head(head, targets, temps, chunk, out):
        model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=width - start)
    return torch.nn.functional.pad(out[-1], (start, 0))


def first_model_position(mask: Tensor) -> int:
    """The first column of a [B, T-1] loss mask holding a model token in any row."""
    columns = mask.any(dim=0).nonzero()
    return int(columns[0]) if len(columns) else 0


@torch.no_grad()
def fill_logprobs(
    accelerator: Any,
    model: torch.nn.Module,
    examples: list[Any],
    attr: str,
    batch_size: int,
    pad_id: int,
    temperature: float = 1.0,
) -> None:
    """Set `example.<attr>` (position-aligned, like the logged ones) from the model as it is now.

    Each process scores `examples[rank::processes]`; all make the same number of forward calls (the
    short ones repeat a chunk and discard it), then every process receives every result. Each
    example is scored at its own recorded temperature when it has one.
    """
    from tapo_backend.data import pad_ids

    was_training = model.training
    model.eval()
    processes, rank = accelerator.num_processes, accelerator.process_index
    mine = list(range(rank, len(examples), processes))
    calls = math.ceil(math.ceil(len(examples) / processes) / batch_size)
    computed: list[tuple[int, list[float]]] = []
    for call in range(calls):
        indices = mine[call * batch_size : (call + 1) * batch_size]
        chunk = [examples[i] for i in indices] or examples[:1]  # an idle process still joins the forward
        input_ids, attention_mask = pad_ids(chunk, pad_id)
        start = min(e.mask.index(1) for e in chunk) - 1  # model tokens are scored from here on
        temps = torch.tensor([e.temperature or temperature for e in chunk])
        with accelerator.autocast():
            lps = token_logprobs(
                model, input_ids.to(accelerator.device), attention_mask.to(accelerator.device), start, temps
            )
        for index, row in zip(indices, lps.float().cpu().tolist(), strict=False):
            computed.append((index, [0.0, *row[: len(examples[index].input_ids) - 1]]))
    if processes > 1 and torch.distributed.is_initialized():  # accelerate/torchrun set it up
        shares: list[Any] = [None] * processes
        torch.distributed.all_gather_object(shares, computed)
        computed = [item for share in shares for item in share]
    for index, values in computed:
        setattr(examples[index], attr, values)
    model.train(was_training)
