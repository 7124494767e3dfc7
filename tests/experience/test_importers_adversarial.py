"""Hostile and malformed logs given to the importers: each bad record is one line naming its file (and
line) and the fix; every good record still imports; no secret reaches what is returned."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from recreate.experience.importers import read_path
from recreate.experience.schema import SchemaError, Trajectory, load_trajectory
from recreate.redact import MASK

CHAT = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}


def _trajectory_doc(**changes) -> dict:
    doc = json.loads(Trajectory(task_id="t", domain="d", messages=CHAT["messages"]).to_json())
    return doc | changes


def _lines(path: Path, *rows: object) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _one_line_each(errors: list[str]) -> None:
    assert all("\n" not in error for error in errors), errors


def test_a_nan_logprob_skips_its_record_alone_and_never_raises(tmp_path):
    """pydantic writes NaN as null, which no longer loads: the import used to raise for the whole batch."""
    bad = _trajectory_doc(trajectory_id="bad", steps=[{"index": 0, "logprobs": [math.nan], "token_ids": [1]}])
    path = _lines(tmp_path / "runs.jsonl", _trajectory_doc(trajectory_id="good"), bad)
    batch = read_path(path)
    assert [t.trajectory_id for t in batch.trajectories] == ["good"]
    assert batch.errors == [
        f"{path}:2: steps[0].logprobs[0] is nan, not a finite number; fix or drop that value in the log"
    ]


def test_a_nan_score_in_an_openai_chat_line_is_named(tmp_path):
    path = _lines(tmp_path / "chats.jsonl", CHAT | {"score": math.inf}, CHAT | {"id": "ok", "score": 1})
    batch = read_path(path)
    assert [t.trajectory_id for t in batch.trajectories] == ["oai-ok"]
    assert batch.errors == [
        f"{path}:1: evaluation.score is inf, not a finite number; fix or drop that value in the log"
    ]


@pytest.mark.parametrize(
    ("record", "said"),
    [
        ({"tool_calls": "oops"}, "messages[1].tool_calls must be a list of {id, function} objects"),
        ({"tool_calls": [5]}, "messages[1].tool_calls must be a list of {id, function} objects"),
        (
            {"tool_calls": [{"id": "c", "function": "ls"}]},
            "tool_calls[].function must be a {name, arguments}",
        ),
    ],
)
def test_an_odd_openai_line_fails_alone(tmp_path, record, said):
    odd = {"messages": [CHAT["messages"][0], {"role": "assistant", "content": "x", **record}]}
    path = _lines(tmp_path / "chats.jsonl", odd, CHAT | {"id": "ok"})
    batch = read_path(path)
    assert [t.trajectory_id for t in batch.trajectories] == ["oai-ok"]  # the good line still imports
    assert len(batch.errors) == 1 and batch.errors[0].startswith(f"{path}:1: ") and said in batch.errors[0]


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"metadata": [1]}, "'metadata' is list; it must be an object"),
        ({"score": "abc"}, "'score' is 'abc'; it must be a number"),
    ],
)
def test_wrong_types_in_an_openai_line_name_the_field(tmp_path, changes, said):
    path = _lines(tmp_path / "chats.jsonl", CHAT | changes, CHAT | {"id": "ok"})
    batch = read_path(path)
    assert len(batch.trajectories) == 1 and batch.errors == [f"{path}:1: {said}"]


def test_an_integer_run_id_is_kept_as_text(tmp_path):
    batch = read_path(_lines(tmp_path / "chats.jsonl", CHAT | {"run_id": 5}))
    assert batch.errors == [] and batch.trajectories[0].run_id == "5"


def test_schema_errors_are_one_line_naming_the_field(tmp_path):
    path = _lines(
        tmp_path / "runs.jsonl",
        _trajectory_doc(run_id=5),
        _trajectory_doc(schema_version="1"),
        _trajectory_doc(trajectory_id="good"),
    )
    batch = read_path(path)
    assert [t.trajectory_id for t in batch.trajectories] == ["good"]
    _one_line_each(batch.errors)
    assert batch.errors[0] == f"{path}:1: run_id: Input should be a valid string (got 5)"
    assert batch.errors[1] == f"{path}:2: schema_version is the text '1'; write the number 1"
    with pytest.raises(SchemaError, match=r"^task_id: Field required$"):
        load_trajectory({k: v for k, v in _trajectory_doc().items() if k != "task_id"})


def test_a_byte_order_mark_is_read_not_refused(tmp_path):
    """Editors and Windows tools write one: 'no JSON found' for a good file was the old answer."""
    for name, text in [
        ("chats.jsonl", json.dumps(CHAT)),
        ("run.json", json.dumps(_trajectory_doc())),
        ("runs.jsonl", json.dumps(_trajectory_doc())),
    ]:
        path = tmp_path / name
        path.write_bytes(b"\xef\xbb\xbf" + text.encode() + b"\r\n")
        batch = read_path(path)
        assert len(batch.trajectories) == 1 and batch.errors == [], (name, batch.errors)


def test_a_line_separator_inside_a_record_does_not_split_it(tmp_path):
    """JSONL written with ensure_ascii=False keeps U+2028 and U+0085 raw; splitlines() cut records there."""
    messages = [{"role": "user", "content": "a\u2028b\x85c"}, {"role": "assistant", "content": "d\u2029"}]
    path = tmp_path / "runs.jsonl"
    path.write_text(
        json.dumps(_trajectory_doc(messages=messages), ensure_ascii=False) + "\n", encoding="utf-8"
    )
    batch = read_path(path)
    assert batch.errors == [] and batch.trajectories[0].messages == messages


def test_a_truncated_file_says_so(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_trajectory_doc())[:80])
    batch = read_path(path)
    assert batch.trajectories == [] and len(batch.errors) == 1
    assert batch.errors[0].startswith(f"{path}: not JSON (") and "truncated" in batch.errors[0]


def test_a_json_array_of_trajectories_imports_each(tmp_path):
    path = tmp_path / "runs.json"
    path.write_text(
        json.dumps([_trajectory_doc(trajectory_id="a"), {"task_id": 1}, _trajectory_doc(trajectory_id="b")])
    )
    batch = read_path(path)
    assert [t.trajectory_id for t in batch.trajectories] == ["a", "b"]
    assert len(batch.errors) == 1 and batch.errors[0].startswith(f"{path}[1]: ")


def test_an_odd_langsmith_trace_fails_alone(tmp_path):
    good = {"id": "r1", "run_type": "chain", "inputs": {"q": "x"}, "outputs": {"output": "y"}}
    odd = {"id": "r2", "run_type": "chain", "inputs": {"messages": "abc"}, "extra": {"metadata": "m"}}
    path = _lines(tmp_path / "runs.jsonl", good, odd)
    batch = read_path(path)
    assert [t.trajectory_id for t in batch.trajectories] == ["ls-r1"]
    assert len(batch.errors) == 1 and batch.errors[0].startswith(f"{path}: trace r2: ")


def test_a_single_run_langsmith_jsonl_imports(tmp_path):
    run = {"id": "r1", "run_type": "chain", "inputs": {"q": "x"}, "outputs": {"output": "y"}}
    batch = read_path(_lines(tmp_path / "runs.jsonl", run))
    assert batch.errors == [] and [t.trajectory_id for t in batch.trajectories] == ["ls-r1"]


def test_pasted_keys_of_common_shapes_never_reach_the_import(tmp_path):
    keys = [
        "ghp_" + "a1" * 18,
        "github_pat_" + "B2" * 20,
        "glpat-" + "c3" * 10,
        "hf_" + "D4" * 17,
        "AIza" + "e5" * 17 + "f",
        "sk-ant-api03-" + "g6" * 20,
    ]
    content = "my keys: " + ", ".join(keys)
    chat = {"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": "ok"}]}
    batch = read_path(_lines(tmp_path / "chats.jsonl", chat))
    stored = batch.trajectories[0].to_json()
    assert not [key for key in keys if key in stored] and stored.count(MASK) >= len(keys)


def test_an_env_secret_is_masked_where_json_would_escape_it(tmp_path, monkeypatch):
    """Redacting the JSON text missed a secret holding a quote or backslash (escaped there)."""
    secret = 'pa"ss\\word-42'
    monkeypatch.setenv("DB_PASSWORD", secret)
    chat = {
        "messages": [{"role": "user", "content": f"use {secret}"}, {"role": "assistant", "content": "ok"}]
    }
    batch = read_path(_lines(tmp_path / "chats.jsonl", chat))
    assert batch.trajectories[0].messages[0]["content"] == f"use {MASK}"


def test_a_numeric_env_value_never_corrupts_the_numbers(tmp_path, monkeypatch):
    """A count named like a secret (MAX_TOKENS) is no secret; and a numeric secret is masked in text only."""
    monkeypatch.setenv("OPENAI_MAX_TOKENS", "131072")
    monkeypatch.setenv("SERVICE_PASSWORD", "424242")
    doc = _trajectory_doc(
        trajectory_id="n", steps=[{"index": 0, "token_ids": [131072, 424242], "message_index": 1}]
    )
    doc["messages"] = [
        {"role": "user", "content": "pin 424242, limit 131072"},
        {"role": "assistant", "content": "ok"},
    ]
    batch = read_path(_lines(tmp_path / "runs.jsonl", doc))
    assert batch.errors == []
    (traj,) = batch.trajectories
    assert traj.steps[0].token_ids == [131072, 424242]
    assert traj.messages[0]["content"] == f"pin {MASK}, limit 131072"
