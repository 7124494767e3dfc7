"""One odd logged trajectory is skipped with its reason; it never stops the dataset being built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recreate.experience.schema import Evaluation, Trajectory
from tapo_backend.data import DataError, build_dataset, tokenize_trajectory

from .conftest import CHATML, make_tokenizer

# a chat template that refuses one message, as real templates do (roles that do not alternate, ...)
REFUSING = (
    "{% for m in messages %}{% if m['content'] == 'boom' %}{{ raise_exception('no boom') }}{% endif %}"
    "{% endfor %}"
)


def _trajectory(trajectory_id: str, answer: str, score: float) -> Trajectory:
    return Trajectory(
        trajectory_id=trajectory_id,
        task_id="task",
        domain="d",
        messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": answer}],
        evaluation=Evaluation(score=score, passed=score > 0),
    )


def _write(folder: Path, *trajectories: Trajectory) -> Path:
    folder.mkdir()
    for traj in trajectories:
        # json.dumps writes an unpaired surrogate as the escape "\ud800", as a buggy logger would
        (folder / f"{traj.trajectory_id}.json").write_text(json.dumps(traj.model_dump()))
    return folder


def test_an_unpaired_surrogate_skips_its_trajectory_alone(tmp_path):
    folder = _write(
        tmp_path / "logs",
        _trajectory("good", "A", 1.0),
        _trajectory("broken", "half a character \ud800", 0.0),
        _trajectory("other", "B", 0.0),
    )
    dataset = build_dataset(folder, make_tokenizer(), min_group_size=1)
    assert sorted(e.trajectory_id for e in dataset.examples) == ["good", "other"]
    (skip,) = dataset.skipped
    assert skip.source.endswith("broken.json") and skip.kind == "untokenizable"
    assert skip.reason == (
        "message 1 (assistant) holds an unpaired UTF-16 surrogate, not text; re-log it as UTF-8 or drop the "
        "trajectory"
    )
    with pytest.raises(DataError, match="unpaired UTF-16 surrogate"):
        tokenize_trajectory(_trajectory("x", "\udfff", 1.0), make_tokenizer())


def test_a_trajectory_the_template_refuses_is_skipped_with_the_reason(tmp_path):
    tokenizer = make_tokenizer(REFUSING + CHATML)
    folder = _write(
        tmp_path / "logs",
        _trajectory("good", "A", 1.0),
        _trajectory("refused", "boom", 0.0),
        _trajectory("other", "B", 0.0),
    )
    dataset = build_dataset(folder, tokenizer, min_group_size=1)
    assert sorted(e.trajectory_id for e in dataset.examples) == ["good", "other"]
    (skip,) = dataset.skipped
    assert skip.kind == "untokenizable" and "no boom" in skip.reason and "\n" not in skip.reason
