"""The versioned store: lineage, refs, diff, rollback, export, scores, and all-or-nothing writes."""

from __future__ import annotations

import json
import logging

import pytest

from recreate.scaffold import (
    AddRule,
    OpError,
    ReplaceText,
    ScaffoldError,
    ScaffoldStore,
    ScaffoldValidationError,
    SetField,
    Vote,
    load_scaffold,
    read_dir,
)
from tests.scaffold.conftest import make_scaffold, tree_snapshot


def test_commit_and_load(store, scaffold):
    info = store.commit(scaffold, message="seed")
    assert (info.ref, info.parent, info.hash) == ("demo@v1", None, scaffold.content_hash())
    loaded = store.load("demo@v1")
    assert loaded == scaffold and loaded.ref == "demo@v1"
    assert store.load("demo").ref == store.load("demo@head").ref == "demo@v1"
    assert store.names() == ["demo"]
    assert loaded.scaffold_ref().model_dump() == {
        "name": "demo",
        "version": "v1",
        "hash": scaffold.content_hash(),
    }


def test_apply_records_lineage(store, scaffold):
    store.commit(scaffold)
    ops = [
        AddRule(text="Print shapes of arrays.", rationale="shape bugs", evidence=["t1", "t2"]),
        Vote(target="rule", id="r1", helpful=1, evidence=["t2", "t3"]),
    ]
    info = store.apply("demo", ops)
    assert (info.ref, info.parent) == ("demo@v2", "demo@v1")
    assert info.evidence == ["t1", "t2", "t3"]
    assert info.rationale == "shape bugs"
    assert [op["op"] for op in info.ops] == ["add_rule", "vote"]
    assert store.load("demo@v2").rules[-1].text == "Print shapes of arrays."
    assert [v.ref for v in store.lineage("demo@v2")] == ["demo@v1", "demo@v2"]


def test_a_commit_equal_to_its_parent_is_not_a_new_version(store, scaffold):
    first = store.commit(scaffold)
    assert store.commit(make_scaffold()).ref == first.ref
    assert store.versions("demo") == [1]


@pytest.mark.parametrize(
    ("ops", "error"),
    [
        ([ReplaceText(field="system_prompt", old="absent", new="x")], OpError),
        ([ReplaceText(field="system_prompt", old="{{ ", new="{{")], OpError),
        ([AddRule(text="ok"), AddRule(id="r1", text="dup")], OpError),
        ([Vote(target="memory", id="nope", helpful=1)], OpError),
        ([SetField(field="limits.max_steps", value=10_000)], ScaffoldValidationError),
        ([SetField(field="instance_template", value="no task")], ScaffoldValidationError),
        ('[{"op": "add_rul", "text": "x"}]', OpError),
    ],
)
def test_bad_ops_leave_the_store_unchanged(store, scaffold, ops, error):
    store.commit(scaffold)
    before = tree_snapshot(store.root)
    with pytest.raises(error):
        store.apply("demo", ops)
    assert tree_snapshot(store.root) == before


def test_refs(store, scaffold):
    store.commit(scaffold)
    v2 = store.apply("demo", [AddRule(text="x")])
    assert store.resolve(f"demo@{v2.hash[:10]}").ref == "demo@v2"
    assert store.resolve("demo@latest").ref == "demo@v2"
    with pytest.raises(ScaffoldError, match=r"no such version of 'demo' \(versions: v1, v2"):
        store.resolve("demo@v9")
    with pytest.raises(ScaffoldError, match=r"no scaffold named 'other' in store .* \(stored: demo\)"):
        store.resolve("other@v1")


def test_rollback_moves_the_head_and_keeps_versions(store, scaffold):
    store.commit(scaffold)
    store.apply("demo", [AddRule(text="x")])
    store.apply("demo", [AddRule(text="y")])
    assert store.rollback("demo").ref == "demo@v2"
    assert store.load("demo").ref == "demo@v2"
    assert store.rollback("demo", to="v1").ref == "demo@v1"
    assert store.versions("demo") == [1, 2, 3]
    with pytest.raises(ScaffoldError, match="demo@v1 has no parent"):
        store.rollback("demo")
    events = [json.loads(line) for line in (store.root / "demo/events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["commit", "commit", "commit", "rollback", "rollback"]
    # the next edit branches from the head it was given
    assert store.apply("demo", [AddRule(text="z")]).parent == "demo@v1"


def test_export_writes_a_plain_scaffold_with_lineage(store, scaffold, tmp_path):
    store.commit(scaffold)
    store.apply("demo", [AddRule(text="x", evidence=["t9"])])
    out = store.export("demo@v2", tmp_path / "out")
    assert read_dir(out) == store.load("demo@v2")
    lineage = json.loads((out / ".lineage.json").read_text())
    assert [(v["version"], v["evidence"]) for v in lineage] == [(1, []), (2, ["t9"])]


def test_diff_is_per_component(store, scaffold):
    store.commit(scaffold)
    store.apply(
        "demo",
        [
            ReplaceText(field="system_prompt", old="careful", new="thorough"),
            SetField(field="limits.max_steps", value=25),
            AddRule(text="New rule."),
            Vote(target="memory", id="m1", harmful=1),
            {"op": "remove_tool", "name": "echo_text"},
        ],
    )
    diff = store.diff("demo@v1", "demo@v2")
    assert diff.components() == ["system_prompt", "limits", "rules", "tools", "memory"]
    text = diff.render()
    assert text.startswith("--- demo@v1\n+++ demo@v2\n")
    assert "~ [system_prompt] system_prompt\n" in text
    assert "-You are a careful agent for {{ domain }}." in text
    assert "+You are a thorough agent for {{ domain }}." in text
    assert "~ [limits] max_steps: 20 -> 25" in text
    assert "+ [rules] r3: New rule." in text
    assert "- [tools] echo_text: Print the given text." in text
    assert "~ [memory] m1: harmful: 0 -> 1" in text
    assert not store.diff("demo@v1", "demo@v1")


def test_scores_attach_later_without_touching_the_version(store, scaffold):
    info = store.commit(scaffold)
    version_files = tree_snapshot(store.root / "demo/v1/scaffold")
    store.attach_scores("demo@v1", {"val_pass_rate": 0.5}, label="gate", n_tasks=8)
    after = store.attach_scores("demo@v1", {"val_pass_rate": 0.625}, label="rerun")
    assert [(s["label"], s["scores"]["val_pass_rate"]) for s in after.scores] == [
        ("gate", 0.5),
        ("rerun", 0.625),
    ]
    assert after.scores[0]["n_tasks"] == 8
    assert tree_snapshot(store.root / "demo/v1/scaffold") == version_files
    assert store.resolve("demo@v1").hash == info.hash


def test_a_scores_line_torn_by_a_kill_is_skipped_with_a_warning(store, scaffold, caplog):
    from typer.testing import CliRunner

    from recreate.scaffold.cli import app

    store.commit(scaffold)
    store.attach_scores("demo@v1", {"val_pass_rate": 0.5}, label="gate")
    scores = store.root / "demo/v1/scores.jsonl"
    with scores.open("a") as fh:
        fh.write('{"at": "2026-12-03T10:00:00+00:00", "label": "val", "sco')  # killed mid-write
    with caplog.at_level(logging.WARNING):
        assert [s["label"] for s in store.resolve("demo@v1").scores] == ["gate"]
        assert store.load("demo@v1").ref == "demo@v1"
    assert f"{scores} line 2 is not JSON" in caplog.text
    after = store.attach_scores("demo@v1", {"val_pass_rate": 0.75}, label="rerun")
    assert [s["label"] for s in after.scores] == ["gate", "rerun"]  # the new row got a line of its own
    log = CliRunner().invoke(app, ["log", "demo", "--store", str(store.root)], env={"COLUMNS": "200"})
    assert log.exit_code == 0 and "val_pass_rate=0.75" in log.output


def test_hand_edited_versions_are_detected(store, scaffold):
    store.commit(scaffold)
    code = store.root / "demo/v1/scaffold/tools/echo_text/main.py"
    code.write_text(code.read_text() + "print('tampered')\n")
    with pytest.raises(ScaffoldError, match="do not match their recorded hash"):
        store.load("demo@v1")


def test_commit_refuses_invalid_scaffolds(store):
    with pytest.raises(ScaffoldValidationError):
        store.commit(make_scaffold(instance_template="no task"))
    assert store.names() == []


def test_parent_must_be_the_same_scaffold(store, scaffold):
    store.commit(make_scaffold(name="other"))
    with pytest.raises(ScaffoldError, match="belongs to another scaffold"):
        store.commit(scaffold, parent="other@v1")


def test_load_scaffold_accepts_every_kind_of_source(store, scaffold, tmp_path, recreate_home):
    store.commit(scaffold)
    store.apply("demo", [AddRule(text="x")])
    exported = store.export("demo@v1", tmp_path / "exported")
    assert load_scaffold(scaffold) is scaffold
    assert load_scaffold(exported) == scaffold
    assert load_scaffold(exported / "scaffold.yaml") == scaffold
    assert load_scaffold(f"{store.root}/demo@v1").ref == "demo@v1"  # lineage folder
    assert load_scaffold(f"{store.root}@v2").ref == "demo@v2"  # store root with one scaffold
    assert load_scaffold(store.root / "demo").ref == "demo@v2"  # lineage folder: its head
    assert load_scaffold("demo@v1", store=store).ref == "demo@v1"
    ScaffoldStore().commit(make_scaffold(name="homed"))  # the default store under RECREATE_HOME
    assert load_scaffold("homed@v1").name == "homed"
    assert (recreate_home / "scaffolds/homed/v1/meta.json").is_file()
    with pytest.raises(ScaffoldError, match="no such scaffold directory or store path"):
        load_scaffold("./missing/dir@v1")
    with pytest.raises(ScaffoldError, match="no scaffold named 'nothing'"):
        load_scaffold("nothing")
    store.commit(make_scaffold(name="second"))
    with pytest.raises(ScaffoldError, match="holds several scaffolds"):
        load_scaffold(f"{store.root}@v1")
