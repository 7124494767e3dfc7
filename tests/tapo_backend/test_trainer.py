from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator

from tapo_backend.config import ConfigError, LoraSettings, TrainConfig
from tapo_backend.data import build_dataset
from tapo_backend.logged import DataError
from tapo_backend.trainer import accumulate_gradients, fill_logprobs, load_model, token_logprobs, train

QV = ["q_proj", "v_proj"]


def _config(tmp_path: Path, name: str = "run", **overrides) -> TrainConfig:
    values = dict(
        algo="tapo",
        lr=3e-3,
        micro_batch_size=4,
        grad_accumulation=2,
        epochs=1,
        run_name=name,
        output_dir=str(tmp_path / "out" / name),
    )
    values.update(overrides)
    return TrainConfig(**values)


def _answer_logprob(model_dir: Path, dataset, answer_reward: float) -> float:
    """Mean log-prob of the final-answer turn over trajectories with the given reward."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    chosen = [e for e in dataset.examples if e.reward == answer_reward]
    ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(e.input_ids) for e in chosen], batch_first=True)
    mask = torch.nn.utils.rnn.pad_sequence([torch.tensor(e.mask) for e in chosen], batch_first=True)[:, 1:]
    last_turn = mask.clone()
    for row in range(len(chosen)):  # keep only the last assistant turn (the answer)
        positions = mask[row].nonzero().flatten().tolist()
        gaps = [i for i in range(1, len(positions)) if positions[i] != positions[i - 1] + 1]
        last_turn[row, : positions[gaps[-1]] if gaps else 0] = 0
    with torch.no_grad():
        lps = token_logprobs(model, ids, torch.ones_like(ids))  # right padding: pads never precede a token
    return float((lps * last_turn).sum() / last_turn.sum())


@pytest.mark.slow
def test_training_raises_logprob_of_rewarded_answers(tmp_path, tiny_model_dir, tokenizer, write_logs) -> None:
    logs = write_logs(tasks=4, per_answer=2)
    dataset = build_dataset(logs, tokenizer)
    before_good = _answer_logprob(tiny_model_dir, dataset, 1.0)
    before_bad = _answer_logprob(tiny_model_dir, dataset, 0.0)
    result = train(_config(tmp_path, epochs=4), logs, str(tiny_model_dir))
    records = [json.loads(line) for line in result.metrics_path.read_text().splitlines()]
    assert result.steps == 8 and len(records) == 8
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in records)
    after_good = _answer_logprob(result.final_dir, dataset, 1.0)
    after_bad = _answer_logprob(result.final_dir, dataset, 0.0)
    assert after_good > before_good + 0.5
    assert after_bad < before_bad
    summary = json.loads((result.output_dir / "dataset_summary.json").read_text())
    assert summary["trajectories"] == 16 and summary["groups"] == 4


def _perturbed_batch(tiny_model_dir, tokenizer, write_logs, accelerator):
    dataset = build_dataset(write_logs(tasks=3, per_answer=2), tokenizer)
    model = load_model(str(tiny_model_dir), TrainConfig(run_name="x", output_dir="unused"))
    fill_logprobs(accelerator, model, dataset.examples, "iteration_logprobs", 4, tokenizer.pad_token_id)
    generator = torch.Generator().manual_seed(0)
    for example in dataset.examples:  # stale behaviour: ratios in and out of the clip window
        noise = torch.randn(len(example.input_ids), generator=generator) * 0.4
        example.iteration_logprobs = (torch.tensor(example.iteration_logprobs) + noise).tolist()
    return model, dataset.examples


@pytest.mark.parametrize(
    ("algo", "loss"),
    [
        ("tapo", {}),
        ("grpo", {}),
        ("dr_grpo", {"max_length": 64}),
        ("gspo", {}),
        ("cumprod", {"kl_coef": 0.0}),
    ],
)
def test_micro_batching_does_not_change_the_gradient(algo, loss, tiny_model_dir, tokenizer, write_logs):
    accelerator = Accelerator()
    model, examples = _perturbed_batch(tiny_model_dir, tokenizer, write_logs, accelerator)
    assert len(examples) == 12
    results = []
    for micro, accumulation in ((12, 1), (5, 3), (1, 12)):
        replica = copy.deepcopy(model)
        config = TrainConfig(
            algo=algo,
            loss=loss,
            micro_batch_size=micro,
            grad_accumulation=accumulation,
            run_name="x",
            output_dir="unused",
        )
        metrics = accumulate_gradients(accelerator, replica, examples, config, tokenizer.pad_token_id)
        grads = torch.cat([p.grad.flatten() for p in replica.parameters()])
        results.append((metrics, grads))
    (full, full_grad), *others = results
    assert full_grad.abs().sum() > 0
    for metrics, grad in others:
        assert metrics["loss"] == pytest.approx(full["loss"], rel=1e-5, abs=1e-7)
        torch.testing.assert_close(grad, full_grad, rtol=1e-4, atol=1e-7)


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(next(directory.glob("*.safetensors"))))


@pytest.mark.slow
@pytest.mark.parametrize("lora", [None, LoraSettings(r=4, alpha=8)], ids=["full", "lora"])
def test_resume_continues_exactly(tmp_path, tiny_model_dir, tokenizer, write_logs, lora) -> None:
    logs = write_logs(tasks=4, per_answer=2)  # 16 trajectories, batch 4 -> 4 steps per epoch
    settings = dict(micro_batch_size=2, grad_accumulation=2, epochs=2, warmup_steps=3, save_every=2)
    settings["lora"] = lora
    straight = train(_config(tmp_path, "straight", max_steps=6, **settings), logs, str(tiny_model_dir))
    # interrupted mid-epoch at step 3, then resumed across the epoch boundary (behaviour log-probs retaken)
    first = train(_config(tmp_path, "resumed", max_steps=3, **settings), logs, str(tiny_model_dir))
    assert first.steps == 3
    # the newest checkpoint only (keep_checkpoints = 1), holding the weights training changes only
    assert [p.name for p in (first.output_dir / "checkpoints").iterdir()] == ["step-0000003"]
    saved = _weights(first.output_dir / "checkpoints" / "step-0000003")
    base = _weights(tiny_model_dir)
    if lora is None:
        assert {name.removeprefix("model.") for name in saved} >= {n.removeprefix("model.") for n in base} - {
            "lm_head.weight"
        }
    else:
        assert saved and all("lora_" in name for name in saved)
    config = _config(tmp_path, "resumed", max_steps=6, **settings)
    resumed = train(config, logs, str(tiny_model_dir), resume=True)
    assert resumed.steps == 6
    a, b = _weights(straight.final_dir), _weights(resumed.final_dir)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6)
    steps = [json.loads(line)["step"] for line in resumed.metrics_path.read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
def test_every_checkpoint_is_kept_when_asked(tmp_path, tiny_model_dir, write_logs) -> None:
    settings = dict(micro_batch_size=2, grad_accumulation=1, epochs=2, max_steps=3, save_every=1)
    config = _config(tmp_path, "all", keep_checkpoints=0, **settings)
    result = train(config, write_logs(tasks=2, per_answer=1), str(tiny_model_dir))
    names = sorted(p.name for p in (result.output_dir / "checkpoints").iterdir())
    assert names == ["step-0000001", "step-0000002", "step-0000003"]


@pytest.mark.slow
def test_a_save_deletes_earlier_checkpoints_only(tmp_path, tiny_model_dir, write_logs) -> None:
    logs = write_logs(tasks=2, per_answer=1)
    settings = dict(micro_batch_size=2, grad_accumulation=1, epochs=2)
    train(_config(tmp_path, "run", max_steps=1, save_every=1, **settings), logs, str(tiny_model_dir))
    out = tmp_path / "out" / "run" / "checkpoints"
    (out / "step-0000000").mkdir()  # a save cut short (no trainer_state.json) before step 1's: deleted
    (out / "step-0000003").mkdir()  # one cut short after it: left for the resumed run to redo
    config = _config(tmp_path, "run", max_steps=2, save_every=1, **settings)
    train(config, logs, str(tiny_model_dir), resume=True)
    assert sorted(p.name for p in out.iterdir()) == ["step-0000002", "step-0000003"]


@pytest.mark.slow
def test_a_fresh_run_into_an_earlier_runs_folder_is_refused(tmp_path, tiny_model_dir, write_logs) -> None:
    logs = write_logs(tasks=2, per_answer=1)
    settings = dict(micro_batch_size=2, grad_accumulation=1, epochs=2)
    first = train(_config(tmp_path, "run", max_steps=1, save_every=1, **settings), logs, str(tiny_model_dir))
    metrics = first.metrics_path.read_text()
    with pytest.raises(DataError, match=r"holds an earlier training run .* --resume, or .*--output-dir"):
        train(_config(tmp_path, "run", max_steps=2, **settings), logs, str(tiny_model_dir))
    assert first.metrics_path.read_text() == metrics  # nothing appended to it, nothing deleted
    assert [p.name for p in (first.output_dir / "checkpoints").iterdir()] == ["step-0000001"]
    config = _config(tmp_path, "run", max_steps=2, save_every=1, **settings)
    assert train(config, logs, str(tiny_model_dir), resume=True).steps == 2  # as the message says


@pytest.mark.slow
@pytest.mark.parametrize(
    ("resumed_with", "message"),
    [
        (dict(), r"lacks model\.embed_tokens"),  # a full fine-tune from a LoRA run's checkpoint
        (
            dict(lora=LoraSettings(r=8, alpha=16, target_modules=QV)),
            r"has .*lora_A.* \(4, 64\), the model \(8, 64\)",
        ),
        (
            dict(lora=LoraSettings(r=4, alpha=8, target_modules=["q_proj"])),
            r"has .*v_proj.*lora.*model lacks",
        ),
    ],
    ids=["full", "rank", "modules"],
)
def test_resume_with_other_trained_weights_is_one_line(
    tmp_path, tiny_model_dir, write_logs, resumed_with, message
) -> None:
    logs = write_logs(tasks=2, per_answer=1)
    lora = LoraSettings(r=4, alpha=8, target_modules=QV)
    train(_config(tmp_path, "run", max_steps=1, lora=lora), logs, str(tiny_model_dir))
    with pytest.raises(DataError, match=r"^--resume: .* does not fit this run .*" + message) as error:
        train(_config(tmp_path, "run", max_steps=2, **resumed_with), logs, str(tiny_model_dir), resume=True)
    assert "\n" not in str(error.value)


@pytest.mark.slow
def test_resume_from_another_model_is_one_line(tmp_path, tiny_model_dir, write_logs) -> None:
    logs = write_logs(tasks=2, per_answer=1)
    lora = LoraSettings(r=4, alpha=8)
    train(_config(tmp_path, "run", max_steps=1, lora=lora), logs, str(tiny_model_dir))
    other = tmp_path / "other-model"
    shutil.copytree(tiny_model_dir, other)  # same weights, another model as far as the run knows
    with pytest.raises(
        DataError, match=r"continues a run of the model .*tiny.* resume with the run's own --model"
    ):
        train(_config(tmp_path, "run", max_steps=2, lora=lora), logs, str(other), resume=True)


def test_resume_without_checkpoint_is_an_error(tmp_path, tiny_model_dir, write_logs) -> None:
    from tapo_backend.data import DataError

    with pytest.raises(DataError, match="no checkpoint"):
        train(_config(tmp_path, "fresh"), write_logs(tasks=2, per_answer=1), str(tiny_model_dir), resume=True)


@pytest.mark.slow
def test_lora_trains_only_the_adapter(tmp_path, tiny_model_dir, write_logs) -> None:
    config = _config(tmp_path, "lora", lora=LoraSettings(r=4, alpha=8), max_steps=2)
    result = train(config, write_logs(tasks=2, per_answer=2), str(tiny_model_dir))
    adapter = json.loads((result.final_dir / "adapter_config.json").read_text())
    assert adapter["r"] == 4
    weights = _weights(result.final_dir)
    assert weights and all("lora_" in name for name in weights)
    assert any(w.abs().sum() > 0 for name, w in weights.items() if "lora_B" in name)  # B starts at 0


@pytest.mark.slow
def test_token_in_token_out_logs_train_with_logged_logprobs(tmp_path, tiny_model_dir, tokenizer, write_logs):
    logs = write_logs(tasks=2, per_answer=2, tokenizer=tokenizer)
    dataset = build_dataset(logs, tokenizer)
    assert all(e.behaviour_logprobs is not None for e in dataset.examples)
    result = train(_config(tmp_path, "tito", epochs=2), logs, str(tiny_model_dir), dataset=dataset)
    assert all(e.iteration_logprobs is None for e in dataset.examples)  # nothing recomputed
    records = [json.loads(line) for line in result.metrics_path.read_text().splitlines()]
    assert len(records) == 2 and all(math.isfinite(r["loss"]) for r in records)

    recomputed = build_dataset(logs, tokenizer)
    config = _config(tmp_path, "tis", max_steps=1, recompute_old_logprobs=True)
    train(config, logs, str(tiny_model_dir), dataset=recomputed)
    assert all(e.iteration_logprobs is not None for e in recomputed.examples)


@pytest.mark.slow
def test_bf16_checkpointing_and_kl_stay_finite(tmp_path, tiny_model_dir, write_logs) -> None:
    config = _config(
        tmp_path,
        "bf16",
        precision="bf16",
        gradient_checkpointing=True,
        epochs=2,
        loss={"kl_coef": 0.05, "kl_estimator": "k3"},
    )
    result = train(config, write_logs(tasks=2, per_answer=2), str(tiny_model_dir))
    records = [json.loads(line) for line in result.metrics_path.read_text().splitlines()]
    assert len(records) == 2
    assert all(math.isfinite(value) for r in records for value in r.values() if isinstance(value, float))


def _launch_two(
    tmp_path: Path,
    logs: Path,
    model: Path,
    config: Path,
    name: str,
    *launch_options: str,
    resume: bool = False,
) -> Path:
    """`accelerate launch` two CPU processes (gloo) of `tapo train`; returns the run's output dir."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    launch = [
        sys.executable, "-m", "accelerate.commands.launch", *launch_options, "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
        str(port), "-m", "tapo_backend.cli", "train", "--logs", str(logs), "--model", str(model),
        "--config", str(config), "--output-dir", str(tmp_path / name), *(["--resume"] if resume else []),
    ]  # fmt: skip
    env = {**os.environ, "ACCELERATE_USE_CPU": "true"}  # no GPU here: gloo on CPU
    done = subprocess.run(launch, capture_output=True, text=True, timeout=600, check=False, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp_path / name


def _assert_same_run(single, two: Path) -> None:
    one, other = _weights(single.final_dir), _weights(two / "final")
    # AdamW's first steps divide by |g|: summation-order noise in near-zero gradients moves a weight by
    # ~1e-5, while a wrong loss scale or normaliser moves every weight by ~lr = 1e-3
    for name in one:
        torch.testing.assert_close(other[name], one[name], rtol=0, atol=5e-5)
    records = [json.loads(line) for line in (two / "metrics.jsonl").read_text().splitlines()]
    single_records = [json.loads(line) for line in single.metrics_path.read_text().splitlines()]
    assert len(records) == len(single_records)  # one line per step, from the main process only
    assert [r["grad_norm"] for r in records] == pytest.approx(
        [r["grad_norm"] for r in single_records], rel=1e-5
    )


@pytest.mark.slow
def test_two_processes_under_accelerate_launch_match_one(tmp_path, tiny_model_dir, write_logs) -> None:
    """DDP on CPU (gloo): half the batch per process, same global normaliser -> the same weights."""
    logs = write_logs(tasks=2, per_answer=2)
    settings = dict(epochs=2, lr=1e-3, grad_accumulation=2, warmup_steps=4)
    single = train(_config(tmp_path, "one", micro_batch_size=4, **settings), logs, str(tiny_model_dir))
    config = tmp_path / "two.toml"
    config.write_text("micro_batch_size = 2\ngrad_accumulation = 2\nepochs = 2\nlr = 1e-3\nwarmup_steps = 4")
    two = _launch_two(tmp_path, logs, tiny_model_dir, config, "two", "--multi_gpu")
    _assert_same_run(single, two)
    assert len(single.metrics_path.read_text().splitlines()) == 2


@pytest.mark.slow
def test_two_processes_with_fsdp_sharding_and_an_uneven_batch_match_one(tmp_path, tiny_model_dir, write_logs):
    """torch's fully_shard over gloo on CPU (accelerate itself falls back to DDP on CPU): a batch of 5
    splits 3/2 across the ranks; both still make the same forward/backward calls (the short one pads
    with a zero-weight micro-batch) and the sharded gradient equals the one-process gradient. With
    unequal call counts the ranks' parameter all-gathers mismatch and the run hangs (timeout)."""
    import os
    import socket
    import subprocess
    import sys

    logs = write_logs(tasks=3, per_answer=1)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    worker = Path(__file__).with_name("fsdp_worker.py")
    out = tmp_path / "fsdp.json"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
        str(worker), str(tiny_model_dir), str(logs), str(out),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["grad_scale"] > 0
    assert result["grad_gap"] <= 1e-5 * result["grad_scale"]
    assert result["logprob_gap"] < 1e-5


def test_token_logprobs_score_the_tempered_distribution_the_logs_were_sampled_from(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from tapo_backend.trainer import token_logprobs

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    ids = torch.tensor([[1, 5, 9, 3, 7, 2]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()
        for temperature in (1.0, 0.7):
            expected = torch.log_softmax(logits / temperature, -1).gather(1, ids[0, 1:, None]).squeeze(1)
            got = token_logprobs(model, ids, torch.ones_like(ids), temperature=temperature)[0]
            assert torch.allclose(got, expected, atol=1e-5)
    assert not torch.allclose(
        token_logprobs(model, ids, torch.ones_like(ids), temperature=0.7),
        token_logprobs(model, ids, torch.ones_like(ids)),
    )


def test_temperature_must_be_positive():
    with pytest.raises(ConfigError, match="temperature must be > 0"):
        TrainConfig(temperature=0).validate()


def test_the_notice_of_a_tied_head_saved_once_is_dropped_and_other_shared_tensors_are_not(caplog):
    import logging

    import tapo_backend.trainer  # noqa: F401  (installs the filter)

    caplog.set_level(logging.WARNING)
    log = logging.getLogger("accelerate.utils.other")
    log.warning(
        "[RANK 0] Removed shared tensor {'base_model.model.lm_head.weight'} while saving. This should be OK"
    )
    log.warning("[RANK 0] Removed shared tensor {'encoder.proj.weight'} while saving. This should be OK")
    assert [r.getMessage() for r in caplog.records] == [
        "[RANK 0] Removed shared tensor {'encoder.proj.weight'} while saving. This should be OK"
    ]


def test_a_model_whose_loss_is_not_finite_stops_training_instead_of_saving_nan_weights(
    tmp_path, tiny_model_dir, write_logs
) -> None:
    """Weights with a NaN (a corrupted checkpoint, or a diverged run resumed) give a NaN loss: the
    trainer refuses to step on them (the log-probs it scores are checked first, the loss after), naming
    the runs, and writes no final model."""
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_model_dir, broken)
    weights_file = next(broken.glob("*.safetensors"))
    weights = load_file(weights_file)
    name = next(k for k in weights if k.endswith("norm.weight"))
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file({k: v.contiguous() for k, v in weights.items()}, weights_file, metadata={"format": "pt"})
    config = _config(tmp_path, "nan", max_steps=1)
    with pytest.raises((DataError, FloatingPointError), match="non-finite|not finite|loss is nan"):
        train(config, write_logs(tasks=2, per_answer=2), str(broken))
    assert not (Path(config.output_dir) / "final").exists()


@pytest.mark.slow
def test_two_processes_checkpoint_the_adapter_and_resume_from_it(
    tmp_path, tiny_model_dir, write_logs
) -> None:
    """DDP's checkpoint of a LoRA run holds the adapter only (DDP's wrapper prefix aside) and
    a two-process resume from it reaches the weights of a run that was not interrupted."""
    logs = write_logs(tasks=2, per_answer=2)
    settings = "micro_batch_size = 1\ngrad_accumulation = 2\nepochs = 2\nlr = 1e-3\nsave_every = 1\n"
    lora = "[lora]\nr = 4\nalpha = 8\n"
    straight, first = tmp_path / "straight.toml", tmp_path / "first.toml"
    straight.write_text(settings + lora)
    first.write_text(settings + "max_steps = 1\n" + lora)
    whole = _launch_two(tmp_path, logs, tiny_model_dir, straight, "straight", "--multi_gpu")
    cut = _launch_two(tmp_path, logs, tiny_model_dir, first, "cut", "--multi_gpu")
    saved = _weights(cut / "checkpoints" / "step-0000001")
    assert saved and all("lora_" in name for name in saved)
    resumed = _launch_two(tmp_path, logs, tiny_model_dir, straight, "cut", "--multi_gpu", resume=True)
    a, b = _weights(whole / "final"), _weights(resumed / "final")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=1e-6)
