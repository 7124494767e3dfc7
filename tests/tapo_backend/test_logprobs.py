"""Chunked log-probs equal the full-logits ones; every process makes the same collective calls."""

from __future__ import annotations

import json
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest
import torch

from tapo_backend.config import TrainConfig
from tapo_backend.data import build_dataset
from tapo_backend.logprobs import fill_logprobs, token_logprobs
from tapo_backend.trainer import accumulate_gradients, load_model, train


@pytest.fixture
def model64(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float64)


def test_chunked_logprobs_and_gradients_equal_the_full_logits_ones(model64):
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 200, (3, 23), generator=gen)
    attention = torch.ones_like(ids)
    temps = torch.tensor([1.0, 0.7, 1.3])
    results = []
    for chunk in (None, 5, 1024):
        model64.zero_grad()
        lps = token_logprobs(model64, ids, attention, start=4, temperature=temps, chunk=chunk)
        (lps * torch.linspace(-1, 1, lps.shape[1], dtype=lps.dtype)).sum().backward()
        results.append(
            (lps.detach(), model64.lm_head.weight.grad.clone(), model64.model.norm.weight.grad.clone())
        )
    for got in results[1:]:
        for a, b in zip(got, results[0], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)
    assert torch.all(results[0][0][:, :4] == 0)
    # per-row temperature: row 1 is scored under T=0.7
    with torch.no_grad():
        logits = model64(input_ids=ids).logits[1, :-1].double() / 0.7
        expected = torch.log_softmax(logits, -1).gather(1, ids[1, 1:, None]).squeeze(1)
    torch.testing.assert_close(results[1][0][1, 4:].double(), expected[4:], rtol=1e-5, atol=1e-6)
    assert not hasattr(model64.lm_head, "forward") or "forward" not in vars(model64.lm_head)  # restored


class RecordingAccelerator:
    """A stand-in for one rank of an N-process accelerate run that records the collective calls."""

    def __init__(self, rank: int, processes: int) -> None:
        self.process_index, self.num_processes = rank, processes
        self.device = torch.device("cpu")
        self.calls: list[str] = []

    def no_sync(self, model):
        self.calls.append("no_sync")
        return nullcontext()

    @contextmanager
    def autocast(self):
        yield

    def backward(self, loss):
        self.calls.append("backward")
        loss.backward()

    def reduce(self, tensor, op):
        self.calls.append("reduce")
        return tensor


def count_forwards(model) -> list[int]:
    counter = [0]
    model.register_forward_pre_hook(lambda *_: counter.__setitem__(0, counter[0] + 1))
    return counter


def test_every_rank_runs_the_same_collective_calls(tmp_path, tiny_model_dir, tokenizer, write_logs):
    logs = write_logs(tasks=3, per_answer=1)  # 6 trajectories; batch of 5 over 2 ranks: 3 and 2
    dataset = build_dataset(logs, tokenizer)
    examples = dataset.examples[:5]
    config = TrainConfig(micro_batch_size=2, output_dir=str(tmp_path / "o"))
    patterns, gradients = [], []
    for rank in (0, 1):
        model = load_model(str(tiny_model_dir), config)
        forwards = count_forwards(model)
        accelerator = RecordingAccelerator(rank, 2)
        fill_logprobs(accelerator, model, examples, "iteration_logprobs", 2, tokenizer.pad_token_id)
        after_fill = forwards[0]
        accumulate_gradients(accelerator, model, examples, config, tokenizer.pad_token_id)
        patterns.append((after_fill, forwards[0] - after_fill, accelerator.calls))
        gradients.append(sum(p.grad.abs().sum() for p in model.parameters() if p.grad is not None))
    # rank 0 holds 3 examples (2 micro-batches), rank 1 two (1 + a zero-weight one): same calls
    assert patterns[0] == patterns[1] == (2, 2, ["no_sync", "backward", "backward", "reduce"])
    assert all(g > 0 for g in gradients)


def test_zero_weight_micro_batches_add_no_gradient(tmp_path, tiny_model_dir, tokenizer, write_logs):
    logs = write_logs(tasks=1, per_answer=1)
    examples = build_dataset(logs, tokenizer).examples[:1]
    config = TrainConfig(micro_batch_size=1, output_dir=str(tmp_path / "o"))
    model = load_model(str(tiny_model_dir), config)
    fill_logprobs(
        RecordingAccelerator(0, 1), model, examples, "iteration_logprobs", 1, tokenizer.pad_token_id
    )
    idle = RecordingAccelerator(1, 2)  # rank 1 of 2 with one example in the batch: nothing of its own
    accumulate_gradients(idle, model, examples, config, tokenizer.pad_token_id)
    assert idle.calls == ["backward", "reduce"]
    assert all(float(p.grad.abs().sum()) == 0.0 for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize(("dtype", "expected"), [("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_dtype_sets_the_loaded_weights(tmp_path, tiny_model_dir, dtype, expected):
    model = load_model(str(tiny_model_dir), TrainConfig(dtype=dtype, output_dir=str(tmp_path)))
    assert {p.dtype for p in model.parameters()} == {expected}


def test_dr_grpo_trains_alone_and_keeps_zero_variance_groups(tmp_path, tiny_model_dir, write_logs):
    logs = write_logs(tasks=2, per_answer=1)
    same = json.loads(next(Path(logs).glob("task-0/*B*.json")).read_text())
    same["trajectory_id"], same["evaluation"]["score"] = "t-extra", 0.0
    extra = Path(logs) / "task-9"
    extra.mkdir()
    for k in range(2):  # a group whose rewards are all equal: advantage 0, but part of TRL's B
        same["trajectory_id"], same["task_id"] = f"t-equal-{k}", "task-9"
        (extra / f"{k}.json").write_text(json.dumps(same))
    config = TrainConfig(algo="dr_grpo", max_steps=1, micro_batch_size=8, output_dir=str(tmp_path / "dr"))
    result = train(config, logs, str(tiny_model_dir))
    summary = json.loads((result.output_dir / "dataset_summary.json").read_text())
    assert summary["trajectories"] == 6 and summary["groups"] == 3
    record = json.loads(result.metrics_path.read_text().splitlines()[0])
    assert record["trajectories"] == 6
