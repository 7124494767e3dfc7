"""The training loop: logged trajectories -> policy-gradient updates of a causal LM.

Read top to bottom: `train` loads the data and the model, then for each pass over the data (an
iteration) takes the behaviour log-probs the logs lack from the model as it is at the start of the
pass, and runs optimizer steps. One step = one batch of trajectories, split into micro-batches whose
losses share the batch's global normaliser, so gradient accumulation (and the number of processes under
`accelerate launch`) does not change the update. Checkpoints hold the accelerate state plus the
log-probs computed so far, so a resumed run continues exactly.
"""

from __future__ import annotations

import json
import math
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from tapo_backend.checkpoints import (
    checkpoint_folders,
    keep_trainable_weights,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from tapo_backend.config import ConfigError, TrainConfig
from tapo_backend.data import DataError, Dataset, Example, collate, dataset_for
from tapo_backend.hub import check_model_available
from tapo_backend.logprobs import fill_logprobs, first_model_position, token_logprobs
from tapo_backend.losses import compute_policy_loss, loss_normalizer

__all__ = ["TrainResult", "accumulate_gradients", "fill_logprobs", "load_model", "token_logprobs", "train"]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "auto": "auto"}


@dataclass
class TrainResult:
    output_dir: Path
    final_dir: Path  # the trained model (a LoRA adapter when `lora` is set)
    steps: int
    metrics_path: Path


# -- model -------------------------------------------------------------------------------------------


def load_tokenizer(model: str) -> Any:
    from transformers import AutoTokenizer

    check_model_available(model)
    tokenizer = AutoTokenizer.from_pretrained(model)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(model: str, config: TrainConfig) -> torch.nn.Module:
    """An HF causal LM from a hub name or local directory, wrapped with LoRA when configured."""
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(model, dtype=DTYPES[config.dtype])
    policy.config.use_cache = False
    if config.gradient_checkpointing:
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if config.lora is not None:
        from peft import LoraConfig, get_peft_model

        lora = config.lora
        policy = get_peft_model(
            policy,
            LoraConfig(
                r=lora.r,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=lora.target_modules,
                task_type="CAUSAL_LM",
            ),
        )
    return policy


# -- one optimizer step ------------------------------------------------------------------------------


def accumulate_gradients(
    accelerator: Accelerator,
    model: torch.nn.Module,
    examples: list[Example],
    config: TrainConfig,
    pad_id: int,
    loss_options: dict[str, Any] | None = None,
) -> dict[str, float]:
    """Forward/backward this process's share of one batch in micro-batches; returns loss metrics.

    The loss normaliser is counted over the whole batch (all processes), so the summed micro-batch
    gradients equal one full-batch gradient. DDP/FSDP average gradients over processes, hence the
    `num_processes` factor. Every process runs the same number of micro-batches (FSDP and ZeRO-3
    gather parameters collectively in each forward/backward): one with a smaller share pads with
    zero-weight micro-batches. Metrics come back summed over processes (loss) or normaliser-weighted.
    `loss_options` defaults to `config.loss_options()` (the trainer passes the run's, fixed per run).
    """
    loss_options = config.loss_options() if loss_options is None else loss_options
    normalizer = sum(
        loss_normalizer(config.algo, torch.tensor([e.mask[1:]], dtype=torch.float32), **loss_options)
        for e in examples
    )
    processes, size = accelerator.num_processes, config.micro_batch_size
    mine = examples[accelerator.process_index :: processes]
    calls = math.ceil(math.ceil(len(examples) / processes) / size)
    chunks = [(mine[i * size : (i + 1) * size], float(processes)) for i in range(calls)]
    # a process with nothing left still joins the collectives, with a zero-weight micro-batch
    chunks = [(chunk, scale) if chunk else (examples[:1], 0.0) for chunk, scale in chunks]
    totals: dict[str, float] = {}
    for index, (chunk, scale) in enumerate(chunks):
        batch = collate(chunk, pad_id, config.recompute_old_logprobs).to(accelerator.device)
        extra = {"ref_logprobs": batch.ref_logprobs} if batch.ref_logprobs is not None else {}
        if batch.behavior_logprobs is not None:
            extra["behavior_logprobs"] = batch.behavior_logprobs
        last = index == len(chunks) - 1
        with nullcontext() if last else accelerator.no_sync(model), accelerator.autocast():
            start = first_model_position(batch.mask)
            temps = torch.tensor([e.temperature or config.temperature for e in chunk])
            logprobs = token_logprobs(model, batch.input_ids, batch.attention_mask, start, temps)
            loss, metrics = compute_policy_loss(
                config.algo,
                logprobs,
                batch.old_logprobs,
                batch.advantages,
                batch.mask,
                normalizer=normalizer,
                **extra,
                **loss_options,
            )
            if not torch.isfinite(
                loss
            ):  # stop before a NaN update poisons the weights (and exit 0 with them)
                raise FloatingPointError(
                    f"the {config.algo} loss is {loss.item()} on a micro-batch of "
                    f"{', '.join(e.trajectory_id for e in chunk[:3])}: the training diverged; lower --lr"
                )
            accelerator.backward(loss * scale)
        metrics = {**metrics, "loss": loss.item()}
        share = float(metrics.get("normalizer", 1.0)) / normalizer * (scale > 0)
        for key, value in metrics.items():
            if key != "normalizer" and isinstance(value, int | float):
                # loss is already normalised globally (it adds up); other metrics are local means
                totals[key] = totals.get(key, 0.0) + (value * (scale > 0) if key == "loss" else value * share)
    if processes > 1:
        keys = sorted(totals)
        summed = accelerator.reduce(torch.tensor([totals[k] for k in keys], device=accelerator.device), "sum")
        totals = dict(zip(keys, summed.tolist(), strict=True))
    return totals


def _schedule(config: TrainConfig) -> Any:
    return lambda step: min(1.0, (step + 1) / config.warmup_steps) if config.warmup_steps else 1.0


# -- the loop ----------------------------------------------------------------------------------------


def _metrics_writer(config: TrainConfig, output_dir: Path) -> Any:
    if not config.tensorboard:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise ConfigError(
            "tensorboard = true needs the `tensorboard` package (pip install tensorboard)"
        ) from exc
    return SummaryWriter(str(output_dir / "tensorboard"))


def _holds_a_run(output_dir: Path) -> bool:
    metrics = output_dir / "metrics.jsonl"
    has_metrics = metrics.is_file() and metrics.stat().st_size > 0
    return has_metrics or bool(checkpoint_folders(output_dir))


def train(
    config: TrainConfig, logs: str | Path, model: str, *, resume: bool = False, dataset: Dataset | None = None
) -> TrainResult:
    accelerator = Accelerator(mixed_precision="bf16" if config.precision == "bf16" else "no")
    set_seed(config.seed)
    output_dir = Path(config.output_dir)
    if not resume and _holds_a_run(output_dir):  # its metrics would mix, its checkpoints be resumed
        raise DataError(
            f"{output_dir} holds an earlier training run (metrics.jsonl or checkpoints): continue it with "
            "--resume, or train into another --output-dir (or delete this one)"
        )
    tokenizer = load_tokenizer(model)
    if dataset is None:
        dataset = dataset_for(config, logs, tokenizer)
    examples = dataset.examples
    if not examples:
        raise DataError(f"no trainable trajectories in {logs}: {dataset.summary()}")

    loss_options = config.loss_options(max(e.model_tokens for e in examples))
    policy = load_model(model, config)
    trainable = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(config))
    policy, optimizer = accelerator.prepare(policy, optimizer)
    # kept out of prepare(): accelerate would step it once per process; one step = one global update
    accelerator.register_for_checkpointing(scheduler)
    keep_trainable_weights(accelerator)
    policy.train()

    batch_size = config.batch_size * accelerator.num_processes
    steps_per_epoch = math.ceil(len(examples) / batch_size)
    total_steps = config.epochs * steps_per_epoch
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    pad_id = tokenizer.pad_token_id

    step = 0
    saving = {"model": model, "keep": config.keep_checkpoints}
    checkpoint = latest_checkpoint(output_dir) if resume else None
    if resume and checkpoint is None:
        raise DataError(f"--resume: no checkpoint under {output_dir / 'checkpoints'}")
    if checkpoint is not None:
        step = load_checkpoint(accelerator, policy, checkpoint, examples, model=model)
    elif config.loss.get("kl_coef", 0) > 0:  # the reference is the model before any update
        fill_logprobs(
            accelerator, policy, examples, "ref_logprobs", config.micro_batch_size, pad_id, config.temperature
        )

    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "train_config.json").write_text(json.dumps(config.to_dict(), indent=2))
        (output_dir / "dataset_summary.json").write_text(json.dumps(dataset.summary(), indent=2))
    metrics_path = output_dir / "metrics.jsonl"
    writer = _metrics_writer(config, output_dir) if accelerator.is_main_process else None
    progress = Progress(
        TextColumn("[bold]train ({task.fields[algo]})"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.4f}"),
        TimeRemainingColumn(),
        disable=not accelerator.is_main_process,
    )
    with progress:
        bar = progress.add_task("train", total=total_steps, completed=step, algo=config.algo, loss=0.0)
        for epoch in range(step // steps_per_epoch, config.epochs):
            first = epoch * steps_per_epoch
            if step >= total_steps:
                break
            if step == first:  # a new iteration: behaviour log-probs the logs lack come from the model now
                missing = [e for e in examples if e.needs_model_logprobs or config.recompute_old_logprobs]
                fill_logprobs(
                    accelerator,
                    policy,
                    missing,
                    "iteration_logprobs",
                    config.micro_batch_size,
                    pad_id,
                    config.temperature,
                )
            order = list(range(len(examples)))
            random.Random(config.seed * 100_003 + epoch).shuffle(order)
            for index in range(step - first, steps_per_epoch):
                if step >= total_steps:
                    break
                batch = [examples[i] for i in order[index * batch_size : (index + 1) * batch_size]]
                started = time.perf_counter()
                metrics = accumulate_gradients(accelerator, policy, batch, config, pad_id, loss_options)
                max_norm = config.max_grad_norm if config.max_grad_norm is not None else math.inf
                grad_norm = accelerator.clip_grad_norm_(policy.parameters(), max_norm)
                lr = scheduler.get_last_lr()[0]  # the rate this step uses
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                tokens = sum(len(e.input_ids) for e in batch)
                record = {
                    **metrics,  # the loss's own; the trainer's fields below win on a shared name
                    "step": step,
                    "epoch": epoch,
                    "lr": lr,
                    "grad_norm": float(grad_norm),
                    "trajectories": len(batch),
                    "tokens": tokens,
                    "model_tokens": sum(e.model_tokens for e in batch),
                    "tokens_per_s": tokens / (time.perf_counter() - started),
                    "reward_mean": sum(e.reward for e in batch) / len(batch),
                }
                if accelerator.is_main_process and step % config.log_every == 0:
                    with metrics_path.open("a", encoding="utf-8") as metrics_file:
                        metrics_file.write(json.dumps(record) + "\n")
                    if writer is not None:
                        for key, value in record.items():
                            writer.add_scalar(key, value, step)
                progress.update(bar, advance=1, loss=metrics.get("loss", 0.0))
                if config.save_every and step % config.save_every == 0 and step < total_steps:
                    save_checkpoint(accelerator, output_dir, step, examples, **saving)
        save_checkpoint(accelerator, output_dir, step, examples, **saving)

    final_dir = output_dir / "final"
    state_dict = accelerator.get_state_dict(policy)  # a collective under FSDP/ZeRO-3: every process calls it
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(policy)
        unwrapped.save_pretrained(str(final_dir), state_dict=state_dict)
        tokenizer.save_pretrained(str(final_dir))
    if writer is not None:
        writer.close()
    accelerator.wait_for_everyone()
    return TrainResult(output_dir=output_dir, final_dir=final_dir, steps=step, metrics_path=metrics_path)
