"""Logged data used as logged: ids vs text, the stop token, per-turn log-probs, recorded sampling."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest

from recreate.experience.schema import ModelInfo
from tapo_backend.data import build_dataset, collate, tokenize_trajectory

from .conftest import synthetic_trajectory


def model_positions(example) -> list[int]:
    return [i for i, m in enumerate(example.mask) if m]


def odd_ids(traj, tokenizer) -> None:
    """Turn 2's ids decode to "BB<|im_end|>" while its stored text is "A"."""
    b = tokenizer.convert_tokens_to_ids("B")
    traj.steps[1].token_ids, traj.steps[1].logprobs = [b, b, tokenizer.eos_token_id], [-0.1, -0.2, -0.3]


def test_ids_that_do_not_decode_to_the_text_are_counted_and_handled_as_asked(tokenizer) -> None:
    traj = synthetic_trajectory(1, "A", tokenizer=tokenizer, logprob=-0.25)
    odd_ids(traj, tokenizer)
    trusted = tokenize_trajectory(traj, tokenizer)
    assert trusted.mismatched_turns == 1
    assert tokenizer.decode([trusted.input_ids[i] for i in model_positions(trusted)]).endswith("BB<|im_end|>")

    retokenized = tokenize_trajectory(traj, tokenizer, on_mismatch="retokenize")
    model_text = tokenizer.decode([retokenized.input_ids[i] for i in model_positions(retokenized)])
    assert model_text.endswith("A<|im_end|>") and "BB" not in model_text
    tail = [retokenized.behaviour_logprobs[i] for i in model_positions(retokenized)][-2:]
    assert all(math.isnan(lp) for lp in tail)  # the retokenized turn's log-probs come from the model
    assert retokenized.behaviour_logprobs[model_positions(retokenized)[0]] == -0.25  # turn 1 still logged

    with pytest.raises(ValueError, match="do not decode to the stored text"):
        tokenize_trajectory(traj, tokenizer, on_mismatch="drop")
    with pytest.raises(ValueError, match="on_mismatch must be one of"):
        tokenize_trajectory(traj, tokenizer, on_mismatch="ignore")


def test_build_dataset_warns_and_summarises_mismatches(tmp_path: Path, tokenizer) -> None:
    for k, answer in enumerate(("A", "B")):
        traj = synthetic_trajectory(0, answer, tokenizer=tokenizer, trajectory_id=f"t{k}")
        if answer == "A":
            odd_ids(traj, tokenizer)
        traj.save(tmp_path / f"t{k}.json")
    with pytest.warns(UserWarning, match="1 logged turn.*--on-mismatch drop\\|trust\\|retokenize"):
        dataset = build_dataset(tmp_path, tokenizer, min_group_size=1)
    assert dataset.summary()["token_text_mismatches"] == 1
    with pytest.warns(UserWarning, match="dropped"):
        dropped = build_dataset(tmp_path, tokenizer, min_group_size=1, on_mismatch="drop")
    assert [Path(s.source).name for s in dropped.skipped] == ["t0.json"]


def test_the_stop_token_the_server_left_out_of_its_ids_keeps_mask_1(tokenizer) -> None:
    traj = synthetic_trajectory(2, "A", tokenizer=tokenizer, logprob=-0.5)
    for step in traj.steps:  # as llama.cpp logs them: the generated text's tokens, not the stop token
        step.token_ids, step.logprobs = step.token_ids[:-1], step.logprobs[:-1]
    example = tokenize_trajectory(traj, tokenizer)
    positions = model_positions(example)
    eos = [i for i in positions if example.input_ids[i] == tokenizer.eos_token_id]
    assert len(eos) == 2  # both turns' stop tokens are trained on
    assert all(math.isnan(example.behaviour_logprobs[i]) for i in eos)
    assert example.mismatched_turns == 0
    full = tokenizer.apply_chat_template(traj.messages, tokenize=False)
    assert tokenizer.decode(example.input_ids) == full


def test_a_turn_cut_at_the_token_cap_generated_no_stop_token(tokenizer) -> None:
    traj = synthetic_trajectory(2, "A", tokenizer=tokenizer, logprob=-0.5)
    for step in traj.steps:  # ended by max_tokens: the template still renders the end of the turn
        step.token_ids, step.logprobs = step.token_ids[:-1], step.logprobs[:-1]
        step.finish_reason = "length"
    example = tokenize_trajectory(traj, tokenizer)
    positions = model_positions(example)
    assert not any(example.input_ids[i] == tokenizer.eos_token_id for i in positions)
    assert not example.needs_model_logprobs  # every model token is a logged one
    assert tokenizer.decode(example.input_ids) == tokenizer.apply_chat_template(traj.messages, tokenize=False)


def test_one_turn_without_logprobs_keeps_the_others(tokenizer) -> None:
    traj = synthetic_trajectory(3, "A", tokenizer=tokenizer, logprob=-0.75)
    traj.steps[1].logprobs = None
    example = tokenize_trajectory(traj, tokenizer)
    assert example.behaviour_logprobs is not None and example.needs_model_logprobs
    positions = model_positions(example)
    first_turn = len(traj.steps[0].token_ids)
    assert [example.behaviour_logprobs[i] for i in positions[:first_turn]] == [-0.75] * first_turn
    assert all(math.isnan(example.behaviour_logprobs[i]) for i in positions[first_turn:])
    example.iteration_logprobs = [-9.0] * len(example.input_ids)
    old = collate([example], pad_id=0).old_logprobs[0]
    values = [float(old[i - 1]) for i in positions]
    assert values == [-0.75] * first_turn + [-9.0] * (len(positions) - first_turn)


def test_recorded_sampling_is_read_and_raw_logprobs_under_it_warned(tmp_path: Path, tokenizer) -> None:
    def write(name: str, sampling: dict) -> Path:
        root = tmp_path / name
        for k, answer in enumerate(("A", "B")):
            traj = synthetic_trajectory(0, answer, tokenizer=tokenizer, trajectory_id=f"{name}{k}")
            traj.model = ModelInfo(name="m", sampling=sampling)
            traj.save(root / f"{k}.json")
        return root

    with pytest.warns(UserWarning, match="2 trajectory.*raw log-probs.*processed_logprobs"):
        raw = build_dataset(write("raw", {"temperature": 0.7, "top_p": 0.9}), tokenizer)
    assert {e.temperature for e in raw.examples} == {0.7}
    assert raw.summary()["raw_logprobs_under_sampling"] == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        processed = build_dataset(
            write("processed", {"temperature": 0.7, "logprobs_mode": "processed_logprobs"}), tokenizer
        )
        plain = build_dataset(write("plain", {"temperature": 1.0, "logit_bias": {}}), tokenizer)
    assert processed.summary()["raw_logprobs_under_sampling"] == 0
    assert plain.summary()["raw_logprobs_under_sampling"] == 0
    with pytest.warns(UserWarning, match="raw log-probs"):
        build_dataset(write("bias", {"logit_bias": {"5": 100}}), tokenizer)
