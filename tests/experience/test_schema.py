"""Trajectory schema v1: JSON Schema file, round trips, versions and migration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recreate.experience import schema
from recreate.experience.schema import SCHEMA_FILE, SchemaError, json_schema, load_trajectory, migrate
from tests.experience.factory import long_trajectory, make_trajectory


def test_shipped_json_schema_file_is_up_to_date() -> None:
    assert json.loads(SCHEMA_FILE.read_text(encoding="utf-8")) == json_schema(), (
        "regenerate with: python -m recreate.experience.schema"
    )


def test_json_schema_describes_the_documents_we_write() -> None:
    doc = json.loads(long_trajectory("t-1", n_steps=5).to_json())
    spec = json_schema()
    assert set(spec["required"]) <= set(doc)
    assert set(doc) <= set(spec["properties"])
    assert spec["properties"]["schema_version"]["const"] == 1


def test_round_trip_through_file_and_text(tmp_path: Path) -> None:
    traj = make_trajectory("t-round")
    path = traj.save(tmp_path / "a" / "t.json")
    assert load_trajectory(path) == traj
    assert load_trajectory(str(path)) == traj
    assert load_trajectory(traj.to_json()) == traj


def test_unknown_version_and_bad_json_are_schema_errors(tmp_path: Path) -> None:
    doc = json.loads(make_trajectory("t-v").to_json())
    with pytest.raises(SchemaError, match="schema_version 99"):
        load_trajectory({**doc, "schema_version": 99})
    with pytest.raises(SchemaError, match="not valid JSON"):
        load_trajectory('{"schema_version": 1, "task_id": ')
    with pytest.raises(SchemaError, match="task_id"):
        load_trajectory({k: v for k, v in doc.items() if k != "task_id"})


def test_migration_hook_upgrades_older_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = json.loads(make_trajectory("t-old").to_json())
    old = {**doc, "schema_version": 0, "task": doc["task_id"]}
    del old["task_id"]

    def v0_to_v1(d: dict) -> dict:
        d["task_id"] = d.pop("task")
        d["schema_version"] = 1
        return d

    monkeypatch.setitem(schema.MIGRATIONS, 0, v0_to_v1)
    assert migrate(dict(old))["task_id"] == "task-1"
    assert load_trajectory(old).task_id == "task-1"
