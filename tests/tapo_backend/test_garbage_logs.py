"""Garbage logs never reach the loss: each fault is skipped and named with its reason (or refused with
--strict), through `tapo train --dry-run`, the loading API and `recreate finetune`'s selection."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recreate.experience.schema import ModelInfo
from recreate.finetune.offline import FinetuneError, select_trajectories
from tapo_backend.data import DataError, build_dataset, collate, tokenize_trajectory
from tapo_backend.load import LOGPROB_TOLERANCE, MAX_FILE_BYTES, read_logs

from .conftest import synthetic_trajectory
from .test_cli import run_tapo


def _set_logprob(value: float) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        doc["steps"][1]["logprobs"][0] = value

    return edit


def _set_reward(value: float) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        doc["evaluation"]["score"] = value

    return edit


def _set_token(value: int) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        doc["steps"][0]["token_ids"][0] = value

    return edit


def _huge_step(doc: dict) -> None:
    doc["steps"][0]["token_ids"] = [65] * 1_000_000
    doc["steps"][0]["logprobs"] = [-1.0] * 1_000_000


# file name -> (edit of a good trajectory's JSON, the kind it is skipped as, words of the reason)
FAULTS: dict[str, tuple[Callable[[dict], None], str, str]] = {
    "neg-inf-logprob": (_set_logprob(-math.inf), "bad logprob", "logprob -inf"),
    "nan-logprob": (_set_logprob(math.nan), "bad logprob", "logprob nan"),
    "positive-logprob": (_set_logprob(50.0), "bad logprob", "logprob 50.0"),
    "nan-reward": (_set_reward(math.nan), "bad reward", "reward (evaluation.score) is nan"),
    "inf-reward": (_set_reward(math.inf), "bad reward", "reward (evaluation.score) is inf"),
    "huge-reward": (_set_reward(1e308), "bad reward", "reward (evaluation.score) is 1e+308"),
    "big-token": (_set_token(10**9), "token id outside the vocabulary", "token id 1000000000"),
    "negative-token": (_set_token(-3), "token id outside the vocabulary", "token id -3"),
    "million-token-step": (_huge_step, "oversized", "1000002 logged token ids, more than"),
}


def _good(tokenizer: Any, task: int, answer: str, name: str) -> dict:
    traj = synthetic_trajectory(task, answer, tokenizer=tokenizer, trajectory_id=name)
    traj.model = ModelInfo(name="tiny", sampling={"temperature": 1.0})
    return traj.model_dump(mode="json")


def _write(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))  # json writes NaN / Infinity / -Infinity as a buggy logger would


@pytest.fixture
def garbage_logs(tmp_path: Path, tokenizer) -> Path:
    """Two trainable tasks (A and B answers) plus one file per fault, and a link out of the folder."""
    logs = tmp_path / "logs"
    for task in range(2):
        for answer in "AB":
            _write(logs / f"ok-{task}-{answer}.json", _good(tokenizer, task, answer, f"ok-{task}-{answer}"))
    for name, (edit, _, _) in FAULTS.items():
        doc = _good(tokenizer, 0, "A", name)
        edit(doc)
        _write(logs / f"{name}.json", doc)
    _write(tmp_path / "elsewhere" / "secret.json", _good(tokenizer, 1, "A", "outside"))
    (logs / "link.json").symlink_to(tmp_path / "elsewhere" / "secret.json")
    os.mkfifo(logs / "fifo.json")  # reading it would block forever
    (logs / "deep.json").write_text("[" * 100_000 + "]" * 100_000)  # json's parser recurses
    return logs


def test_each_bad_file_is_skipped_and_named_with_its_reason(garbage_logs: Path, tokenizer) -> None:
    dataset = build_dataset(garbage_logs, tokenizer)
    assert sorted(e.trajectory_id for e in dataset.examples) == ["ok-0-A", "ok-0-B", "ok-1-A", "ok-1-B"]
    skipped = {Path(s.source).stem: s for s in dataset.skipped}
    for name, (_, kind, words) in FAULTS.items():
        assert skipped[name].kind == kind and words in skipped[name].reason, (name, skipped[name])
    assert skipped["link"].kind == "link outside the logs" and "secret.json" in skipped["link"].reason
    assert skipped["fifo"].reason == "not a regular file"
    assert "RecursionError" in skipped["deep"].reason
    summary = dataset.summary()
    assert summary["skipped"] == len(FAULTS) + 3
    assert summary["skipped_by_kind"] == {
        "bad logprob": 3, "bad reward": 3, "token id outside the vocabulary": 2, "oversized": 1,
        "link outside the logs": 1, "unreadable": 2,
    }  # fmt: skip
    assert math.isfinite(summary["reward_mean"]) and math.isfinite(summary["reward_std"])


def test_dry_run_counts_skips_by_reason_and_strict_refuses(
    monkeypatch, capsys, recreate_home, tiny_model_dir, garbage_logs
) -> None:
    args = ("train", "--logs", str(garbage_logs), "--model", str(tiny_model_dir), "--dry-run")
    code, out, err = run_tapo(monkeypatch, capsys, *args)
    assert code == 0, err
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in out.splitlines()
        if line.count("│") == 3
    }
    assert rows["trajectories"] == "4" and rows["skipped"] == str(len(FAULTS) + 3)
    assert rows["bad logprob"] == "3" and rows["bad reward"] == "3"
    assert rows["reward mean ± std"] == "0.5 ± 0.5"  # not "nan ± nan"
    assert "nan-logprob.json: step 1: logprob nan is not a log-probability" in out

    code, _, err = run_tapo(monkeypatch, capsys, *args, "--strict")
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert "--strict refuses bad logs" in err and ".json: " in err


def test_a_small_positive_logprob_is_rounding_and_reads_as_zero(tmp_path: Path, tokenizer) -> None:
    doc = _good(tokenizer, 0, "A", "rounded")
    doc["steps"][1]["logprobs"][0] = LOGPROB_TOLERANCE / 2
    _write(tmp_path / "rounded.json", doc)
    (logged,), skipped = read_logs(tmp_path, vocab_size=len(tokenizer))
    assert skipped == []
    example = tokenize_trajectory(logged.trajectory, tokenizer)
    assert max(lp for lp, m in zip(example.behaviour_logprobs, example.mask, strict=True) if m) <= 0.0


@settings(max_examples=60, deadline=None)
@given(
    value=st.one_of(
        st.just(math.nan), st.just(math.inf), st.just(-math.inf), st.floats(LOGPROB_TOLERANCE * 1.01, 1e300)
    )
)
def test_no_impossible_logprob_loads(tmp_path_factory, tokenizer, value: float) -> None:
    folder = tmp_path_factory.mktemp("prop")
    doc = _good(tokenizer, 0, "A", "x")
    doc["steps"][0]["logprobs"][-1] = value
    _write(folder / "x.json", doc)
    kept, skipped = read_logs(folder, vocab_size=len(tokenizer))
    assert kept == [] and skipped[0].kind == "bad logprob"


def test_the_loss_path_refuses_non_finite_values(tokenizer) -> None:
    example = tokenize_trajectory(synthetic_trajectory(0, "A", tokenizer=tokenizer), tokenizer)
    example.advantage = math.nan
    with pytest.raises(DataError, match="non-finite advantages"):
        collate([example], pad_id=tokenizer.pad_token_id)
    example.advantage = 1.0
    example.behaviour_logprobs[5] = -math.inf  # as a model's own log-probs could come back
    with pytest.raises(DataError, match="non-finite old log-probs for trajectory"):
        collate([example], pad_id=tokenizer.pad_token_id)


def test_max_length_has_a_default_and_is_checked(
    monkeypatch, capsys, recreate_home, tiny_model_dir, tmp_path, tokenizer
):
    doc = _good(None, 0, "A", "long")  # no logged ids: the turns are rendered by the template
    doc["messages"][4]["content"] = "x" * 9000  # byte-level tokenizer: one token per character
    _write(tmp_path / "logs" / "long.json", doc)
    (example,) = build_dataset(
        tmp_path / "logs", tokenizer, min_group_size=1, drop_zero_variance=False
    ).examples
    assert len(example.input_ids) == 8192 and example.cut
    code, _, err = run_tapo(
        monkeypatch, capsys, "train", "--logs", str(tmp_path / "logs"), "--model", str(tiny_model_dir),
        "--max-length", "1", "--dry-run",
    )  # fmt: skip
    assert code == 2 and "max_length must be >= 2" in err


def test_finetune_selection_skips_garbage_and_links_out_of_the_run(tmp_path: Path, tokenizer) -> None:
    run = tmp_path / "runs" / "r1"
    folder = run / "trajectories"
    folder.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"train": ["task-0", "task-1"], "val": []}))
    for name, (edit, _, _) in FAULTS.items():
        doc = _good(tokenizer, 0, "A", name)
        edit(doc)
        _write(folder / f"{name}.json", doc)
    _write(folder / "fine.json", _good(tokenizer, 0, "B", "fine"))
    _write(tmp_path / "elsewhere.json", _good(tokenizer, 1, "A", "outside"))
    (folder / "link.json").symlink_to(tmp_path / "elsewhere.json")
    selection = select_trajectories(run)
    # an id past the vocabulary is the trainer's to refuse (it knows the tokenizer): kept here
    assert [f.name for f in selection.files] == ["big-token.json", "fine.json"]
    assert selection.skipped == {
        "bad logprob": 3, "bad reward": 3, "oversized": 1, "link outside the logs": 1,
        "token id outside the vocabulary": 1,
    }  # fmt: skip
    with pytest.raises(FinetuneError, match=r"\.json: .*--strict"):  # `recreate finetune --strict`
        select_trajectories(run, strict=True)


def test_training_beside_garbage_has_a_finite_loss(
    monkeypatch, capsys, recreate_home, tiny_model_dir, garbage_logs
) -> None:
    code, out, err = run_tapo(
        monkeypatch, capsys, "train", "--logs", str(garbage_logs), "--model", str(tiny_model_dir),
        "--run-name", "beside-garbage", "--max-steps", "1", "--lr", "1e-3",
    )  # fmt: skip
    assert code == 0, err
    (row,) = map(
        json.loads, (recreate_home / "tapo" / "beside-garbage" / "metrics.jsonl").read_text().splitlines()
    )
    assert all(math.isfinite(v) for v in row.values() if isinstance(v, float)), row


def test_a_file_too_large_to_be_a_log_is_not_read(tmp_path: Path) -> None:
    with (tmp_path / "huge.jsonl").open("wb") as sparse:  # sparse: costs no disk
        sparse.truncate(MAX_FILE_BYTES + 1)
    kept, skipped = read_logs(tmp_path)
    assert kept == [] and skipped[0].kind == "oversized" and "bytes, more than" in skipped[0].reason


def test_a_bad_byte_a_line_separator_or_a_byte_order_mark_costs_no_other_record(
    tmp_path: Path, tokenizer
) -> None:
    rows = [_good(tokenizer, task, f"{task}\u2028", f"t{task}") for task in range(3)]  # U+2028 inside
    lines = [json.dumps(row, ensure_ascii=False).encode() for row in rows]
    lines.insert(1, b'{"task_id": "x", "messages": "\xff\xfe"}')  # not UTF-8: this line alone is lost
    (tmp_path / "logs.jsonl").write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n")
    kept, skipped = read_logs(tmp_path)
    assert sorted(logged.trajectory.task_id for logged in kept) == sorted(row["task_id"] for row in rows)
    assert [(s.source, s.reason.split(":")[0]) for s in skipped] == [
        (f"{tmp_path / 'logs.jsonl'}:2", "unreadable")
    ]
