from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from recreate.experience.schema import Evaluation
from tapo_backend.data import DataError, build_dataset, collate, load_trajectories, tokenize_trajectory

from .conftest import DROPS_OLD_REASONING, make_tokenizer, synthetic_trajectory


def _segments(example, tokenizer) -> list[tuple[int, str]]:
    """(mask, decoded text) runs of an example, to read what was trained on."""
    runs: list[tuple[int, list[int]]] = []
    for token, m in zip(example.input_ids, example.mask, strict=True):
        if runs and runs[-1][0] == m:
            runs[-1][1].append(token)
        else:
            runs.append((m, [token]))
    return [(m, tokenizer.decode(ids)) for m, ids in runs]


def test_template_path_masks_only_assistant_tokens(tokenizer) -> None:
    traj = synthetic_trajectory(0, "A")
    example = tokenize_trajectory(traj, tokenizer)
    full = tokenizer.apply_chat_template(traj.messages, tokenize=False)
    assert tokenizer.decode(example.input_ids) == full  # the whole conversation, nothing lost or added
    model_text = [text for m, text in _segments(example, tokenizer) if m == 1]
    assert model_text == ["look 0<|im_end|>", "A<|im_end|>"]
    assert example.behaviour_logprobs is None and not example.token_in_token_out
    assert example.reward == 1.0 and example.group == "task-0"


def test_token_in_token_out_uses_logged_ids_and_logprobs(tokenizer) -> None:
    traj = synthetic_trajectory(1, "B", tokenizer=tokenizer, logprob=-0.25)
    # ids the template would never produce from the text: proof that nothing is re-tokenised
    odd = [tokenizer.convert_tokens_to_ids("B"), tokenizer.convert_tokens_to_ids("B"), tokenizer.eos_token_id]
    traj.steps[1].token_ids, traj.steps[1].logprobs = odd, [-0.1, -0.2, -0.3]
    example = tokenize_trajectory(traj, tokenizer)
    assert example.token_in_token_out
    model_positions = [i for i, m in enumerate(example.mask) if m]
    model_ids = [example.input_ids[i] for i in model_positions]
    first_turn = tokenizer("look 1<|im_end|>", add_special_tokens=False)["input_ids"]
    assert model_ids == first_turn + odd
    lps = [example.behaviour_logprobs[i] for i in model_positions]
    assert lps == [-0.25] * len(first_turn) + [-0.1, -0.2, -0.3]
    assert all(example.behaviour_logprobs[i] == 0.0 for i, m in enumerate(example.mask) if not m)
    # the tool result and the template glue between turns are still there, as environment tokens
    env_text = "".join(text for m, text in _segments(example, tokenizer) if m == 0)
    assert "A is right, B is wrong." in env_text and "<|im_start|>tool" in env_text


def test_not_append_only_template_is_a_clear_error() -> None:
    tokenizer = make_tokenizer(DROPS_OLD_REASONING)
    traj = synthetic_trajectory(0, "A")
    traj.messages[2]["content"] = "<think>hmm</think>look"
    with pytest.raises(DataError, match="not append-only"):
        tokenize_trajectory(traj, tokenizer)
    traj.messages[2]["content"] = "look"  # without reasoning the same template appends only
    assert sum(tokenize_trajectory(traj, tokenizer).mask) > 0


def test_tool_and_user_tokens_have_mask_zero(tokenizer) -> None:
    traj = synthetic_trajectory(0, "A")
    example = tokenize_trajectory(traj, tokenizer)
    for m, text in _segments(example, tokenizer):
        if m == 1:
            assert "Task 0" not in text and "A is right" not in text and "one letter" not in text


def test_load_skips_corrupt_and_foreign_files_with_reasons(tmp_path: Path, tokenizer) -> None:
    good = synthetic_trajectory(0, "A", trajectory_id="t-good")
    good.save(tmp_path / "a" / "good.json")
    good.save(tmp_path / "b" / "again.json")  # same id twice
    (tmp_path / "broken.json").write_text('{"task_id": "x", "messages": [')
    (tmp_path / "catalog.json").write_text(json.dumps({"version": 3, "runs": []}))
    (tmp_path / "bad_version.json").write_text(json.dumps({**good.model_dump(), "schema_version": 99}))
    unscored = synthetic_trajectory(1, "A", trajectory_id="t-unscored")
    unscored.evaluation = None
    unscored.save(tmp_path / "unscored.json")
    lines = [synthetic_trajectory(2, "B", trajectory_id="t-line").to_json(), "{not json"]
    (tmp_path / "shard.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00garbage")

    trajectories, skipped = load_trajectories(tmp_path)
    assert sorted(t.trajectory_id for t in trajectories) == ["t-good", "t-line"]
    reasons = {Path(s.source.split(":")[0]).name: s.reason for s in skipped}
    assert reasons["broken.json"].startswith("unreadable")
    assert reasons["catalog.json"] == "not a trajectory"
    assert "schema_version" in reasons["bad_version.json"]
    assert "no evaluation" in reasons["unscored.json"]
    assert sum("duplicate trajectory id t-good" in s.reason for s in skipped) == 1
    assert any(s.source.endswith("shard.jsonl:2") for s in skipped)
    assert "unreadable" in reasons["binary.json"]


def test_missing_path_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such file"):
        load_trajectories(tmp_path / "nope")


def test_groups_filters_and_advantages(tmp_path: Path, tokenizer) -> None:
    root = tmp_path / "logs"
    for k, answer in enumerate(["A", "B", "B", "A"]):  # task 0: mixed rewards
        synthetic_trajectory(0, answer, trajectory_id=f"mixed-{k}").save(root / f"mixed-{k}.json")
    for k in range(3):  # task 1: all succeed -> no signal
        synthetic_trajectory(1, "A", trajectory_id=f"same-{k}").save(root / f"same-{k}.json")
    synthetic_trajectory(2, "A", trajectory_id="alone").save(root / "alone.json")  # singleton

    dataset = build_dataset(root, tokenizer, min_group_size=2)
    assert {e.group for e in dataset.examples} == {"task-0"}
    assert dataset.dropped_groups == {"task-1": "all rewards equal", "task-2": "fewer than 2 trajectories"}
    by_id = {e.trajectory_id: e.advantage for e in dataset.examples}
    assert by_id["mixed-0"] > 0 > by_id["mixed-1"]
    assert sum(by_id.values()) == pytest.approx(0.0, abs=1e-9)

    kept_all = build_dataset(root, tokenizer, min_group_size=1, drop_zero_variance=False)
    assert {e.group for e in kept_all.examples} == {"task-0", "task-1", "task-2"}
    summary = dataset.summary()
    assert summary["groups"] == 1 and summary["trajectories"] == 4
    assert 0 < summary["mask_ratio"] < 1 and summary["reward_min"] == 0.0 and summary["reward_max"] == 1.0


def test_the_same_runs_under_other_ids_make_the_same_dataset(tmp_path: Path, tokenizer) -> None:
    """Run ids are random, and files are named by them: the order the trainer sees (and so the adapter
    it trains) must come from the runs, not from their names."""
    runs = [(task, answer) for task in range(3) for answer in ("A", "B", "A", "B")]
    built = []
    for name, ids in (("first", range(len(runs))), ("again", reversed(range(len(runs))))):
        root = tmp_path / name
        for (task, answer), n in zip(runs, ids, strict=True):
            synthetic_trajectory(task, answer, trajectory_id=f"t-{n:02d}").save(root / f"t-{n:02d}.json")
        built.append(build_dataset(root, tokenizer, min_group_size=2))
    first, again = ([(e.group, e.reward, e.input_ids, e.advantage) for e in d.examples] for d in built)
    assert len(first) == 12 and first == again


def test_unusable_trajectory_is_skipped_not_fatal(tmp_path: Path, tokenizer) -> None:
    root = tmp_path / "logs"
    for k, answer in enumerate("AB"):
        synthetic_trajectory(0, answer, trajectory_id=f"ok-{k}").save(root / f"ok-{k}.json")
    silent = synthetic_trajectory(0, "A", trajectory_id="silent")
    silent.messages = silent.messages[:2]
    silent.steps = []
    silent.save(root / "silent.json")
    mismatch = synthetic_trajectory(0, "B", tokenizer=tokenizer, trajectory_id="mismatch")
    mismatch.steps[0].logprobs = [-1.0]
    mismatch.save(root / "mismatch.json")
    misplaced = synthetic_trajectory(0, "B", tokenizer=tokenizer, trajectory_id="misplaced")
    misplaced.steps[0].message_index = 1  # the user message
    misplaced.save(root / "misplaced.json")
    dataset = build_dataset(root, tokenizer)
    assert len(dataset.examples) == 2
    reasons = {Path(s.source).stem: s.reason for s in dataset.skipped}  # named by their files
    assert reasons["silent"] == "no assistant messages"
    assert "logprobs" in reasons["mismatch"]
    assert "message_index 1 is not an assistant message" in reasons["misplaced"]


def test_max_length_cuts_the_tail(tokenizer) -> None:
    traj = synthetic_trajectory(0, "A")
    full = tokenize_trajectory(traj, tokenizer)
    cut = tokenize_trajectory(traj, tokenizer, max_length=len(full.input_ids) - 5)
    assert cut.input_ids == full.input_ids[: len(cut.input_ids)] and cut.model_tokens < full.model_tokens
    with pytest.raises(DataError, match="no model tokens"):
        tokenize_trajectory(traj, tokenizer, max_length=10)


def test_collate_shifts_and_pads(tokenizer) -> None:
    short = tokenize_trajectory(synthetic_trajectory(0, "A", tokenizer=tokenizer, logprob=-0.5), tokenizer)
    long = tokenize_trajectory(synthetic_trajectory(12345, "B", tokenizer=tokenizer, logprob=-0.7), tokenizer)
    short.advantage, long.advantage = 1.0, -1.0
    batch = collate([short, long], pad_id=tokenizer.pad_token_id)
    width = len(long.input_ids)
    assert batch.input_ids.shape == (2, width) and batch.mask.shape == (2, width - 1)
    assert batch.attention_mask[0].sum() == len(short.input_ids)
    assert batch.input_ids[0, len(short.input_ids) :].eq(tokenizer.pad_token_id).all()
    # position t of the loss tensors scores input_ids[t + 1]
    assert batch.mask[0].tolist()[: len(short.input_ids) - 1] == [float(m) for m in short.mask[1:]]
    assert torch.equal(batch.old_logprobs[1] != 0, batch.mask[1].bool())
    assert batch.old_logprobs[1][batch.mask[1].bool()].eq(-0.7).all()
    assert batch.advantages.tolist() == [1.0, -1.0] and batch.behavior_logprobs is None

    template_only = tokenize_trajectory(synthetic_trajectory(3, "A"), tokenizer)
    with pytest.raises(ValueError, match="neither logged nor computed"):
        collate([template_only], pad_id=tokenizer.pad_token_id)
    template_only.iteration_logprobs = [-2.0] * len(template_only.input_ids)
    assert collate([template_only], pad_id=0).old_logprobs.eq(-2.0).all()


def test_zero_score_evaluation_is_a_reward(tokenizer) -> None:
    traj = synthetic_trajectory(0, "B")
    traj.evaluation = Evaluation(score=0.25, passed=False)
    assert tokenize_trajectory(traj, tokenizer).reward == 0.25


def test_reads_an_experience_store(tmp_path: Path, tokenizer) -> None:
    from recreate.experience.store import ExperienceStore

    store = ExperienceStore(tmp_path / "store", index=False)
    for k, answer in enumerate("ABAB"):
        store.add(synthetic_trajectory(0, answer, trajectory_id=f"stored-{k}"))
    (tmp_path / "store" / "memory.jsonl").write_text('{"id": "m1", "title": "a memory item"}\n')
    dataset = build_dataset(tmp_path / "store", tokenizer)
    assert sorted(e.trajectory_id for e in dataset.examples) == [f"stored-{k}" for k in range(4)]
    assert [s.reason for s in dataset.skipped] == ["not a trajectory"]  # the memory line, reported


def test_worked_example_turns_are_context_and_keep_the_logged_logprobs(tokenizer) -> None:
    traj = synthetic_trajectory(2, "A", tokenizer=tokenizer, logprob=-0.5)
    example_turns = [
        {"role": "user", "content": "Task 9: pick a letter.", "name": "example"},
        {"role": "assistant", "content": "A", "name": "example"},
    ]
    traj.messages[2:2] = example_turns  # shown before the model's own turns, as the agent sends them
    for step in traj.steps:
        step.message_index += len(example_turns)
    example = tokenize_trajectory(traj, tokenizer)
    model_text = [text for m, text in _segments(example, tokenizer) if m == 1]
    assert model_text == ["look 2<|im_end|>", "A<|im_end|>"]  # the example's "A" is not trained on
    assert example.behaviour_logprobs is not None and example.token_in_token_out
