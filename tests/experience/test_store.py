"""The store: files + catalog + index, duplicates, bad input, drift and rebuild."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from recreate.experience import indexer
from recreate.experience.schema import SchemaError, load_trajectory
from recreate.experience.store import DuplicateTrajectoryError, ExperienceStore, StoreError
from tests.experience.factory import bash_step, make_trajectory


def test_add_get_list_with_filters(store: ExperienceStore) -> None:
    store.add(make_trajectory("t-a", task_id="task-1", passed=True))
    store.add(make_trajectory("t-b", task_id="task-1", passed=False, version="v2"))
    store.add(make_trajectory("t-c", task_id="task-2", domain="math"))
    assert store.get("t-b").evaluation.passed is False
    assert [e.id for e in store.list({"task_id": "task-1"})] == ["t-a", "t-b"]
    assert [e.id for e in store.list({"outcome": "failed"})] == ["t-b"]
    assert [e.id for e in store.list({"scaffold_version": "v2"})] == ["t-b"]
    entry = store.catalog.get("t-c")
    assert (entry.domain, entry.n_steps, entry.scaffold_hash, entry.model) == (
        "math",
        4,
        "abc123def456",
        "scripted-model",
    )
    assert (store.root / entry.path).is_file()
    with pytest.raises(ValueError, match="unknown filter"):
        store.list({"colour": "red"})


def test_duplicate_ids_are_refused_and_the_stored_one_is_untouched(store: ExperienceStore) -> None:
    store.add(make_trajectory("t-dup", task_id="original"))
    path = store.root / store.catalog.get("t-dup").path
    before = path.read_bytes()
    with pytest.raises(DuplicateTrajectoryError):
        store.add(make_trajectory("t-dup", task_id="impostor"))
    report = store.ingest(
        [make_trajectory("t-dup", task_id="impostor", domain="math"), make_trajectory("t-new")]
    )
    assert report.duplicates == ["t-dup"] and report.added == ["t-new"]
    assert path.read_bytes() == before
    assert store.get("t-dup").task_id == "original"
    assert not (store.files / "math" / "t-dup.json").exists()


def test_bad_documents_are_reported_not_stored(store: ExperienceStore) -> None:
    good = json.loads(make_trajectory("t-good").to_json())
    report = store.ingest([{**good, "trajectory_id": "t-v9", "schema_version": 9}, {"nonsense": 1}, good])
    assert report.added == ["t-good"]
    assert len(report.errors) == 2 and "schema_version 9" in report.errors[0]
    with pytest.raises(SchemaError):
        store.add({**good, "schema_version": 9})
    with pytest.raises(StoreError, match="file name"):
        store.add(make_trajectory("../../etc/passwd"))
    assert [e.id for e in store.list()] == ["t-good"]


def test_huge_observations_are_truncated_and_reported(tmp_path) -> None:
    store = ExperienceStore(tmp_path, embedding="hash", max_observation_chars=10_000)
    huge = "x" * 2_000_000
    traj = make_trajectory("t-huge", steps=[bash_step(0, "cat big.log", stdout=huge), bash_step(1, "ls")])
    traj.messages.append({"role": "tool", "content": huge})
    report = store.ingest([traj])
    assert report.added == ["t-huge"]
    assert len(report.truncated) == 2 and "2000000 chars" in report.truncated[0]
    stored = store.get("t-huge")
    assert len(stored.steps[0].observation.stdout) <= 10_000 and stored.steps[0].observation.stdout_truncated
    assert len(stored.messages[-1]["content"]) <= 10_000
    assert store.verify().ok


def test_memory_written_after_a_torn_line_is_kept(store: ExperienceStore) -> None:
    store.add_memory([{"id": "m-1", "title": "Check shapes", "content": "print df.shape first"}])
    with store.memory_file.open("a") as fh:
        fh.write('{"id": "m-2", "title": "Tor')  # the writer was killed mid-line
    store.add_memory([{"id": "m-3", "title": "Read errors", "content": "the last line first"}])
    assert sorted(i["id"] for i in store.memory_items()) == ["m-1", "m-3"]


def test_verify_reports_each_kind_of_drift_and_reindex_repairs_it(store: ExperienceStore) -> None:
    store.ingest([make_trajectory(f"t-{i}") for i in range(5)])
    store.add_memory([{"id": "m-1", "title": "Check shapes", "content": "print df.shape first"}])
    assert store.verify().ok
    # a row lost from the catalog, an index entry lost, a stray index entry, a file written behind our back
    with sqlite3.connect(store.catalog.path) as db:
        db.execute("DELETE FROM trajectories WHERE id = 't-0'")
    store.index.delete("steps", ["t-1#2"])
    store.index.add([make_trajectory("t-ghost")])
    make_trajectory("t-manual").save(store.files / "ds1000" / "t-manual.json")
    (store.files / "ds1000" / "t-broken.json").write_text('{"schema_version": 1, "task', encoding="utf-8")
    drift = store.verify()
    assert not drift.ok
    assert {"t-0", "t-manual", "t-broken"} <= set(drift.uncataloged_files)
    assert "t-1" in drift.missing_in_index
    assert "t-ghost" in drift.extra_in_index
    report = store.reindex()
    assert len(report.errors) == 1 and "t-broken" in report.errors[0]
    assert (store.files / "ds1000" / "t-broken.json").exists()  # left in place for the user
    (store.files / "ds1000" / "t-broken.json").unlink()
    assert store.verify().ok, store.verify().lines()
    assert {e.id for e in store.list()} == {f"t-{i}" for i in range(5)} | {"t-manual"}
    assert store.search("shapes", scope="memory", k=1)[0].id == "m-1"


def test_reindex_removes_stale_temp_files_and_keeps_added_at(store: ExperienceStore) -> None:
    store.add(make_trajectory("t-keep"))
    added_at = store.catalog.get("t-keep").added_at
    stale = store.files / "ds1000" / ".t-x.json.deadbeef.tmp"
    stale.write_text("{half", encoding="utf-8")
    store.reindex()
    assert not stale.exists()
    assert store.catalog.get("t-keep").added_at == added_at


def test_export_writes_schema_v1_jsonl(store: ExperienceStore, tmp_path) -> None:
    store.ingest([make_trajectory("t-1", passed=True), make_trajectory("t-2", passed=False)])
    out = tmp_path / "out.jsonl"
    assert store.export(out, {"outcome": "passed"}) == 1
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [load_trajectory(line).trajectory_id for line in lines] == ["t-1"]


def test_store_without_auto_index_syncs_later(tmp_path) -> None:
    store = ExperienceStore(tmp_path, embedding="hash", index=False)
    store.ingest([make_trajectory(f"t-{i}") for i in range(3)])
    assert not store.verify().ok
    assert store.sync_index() == 3
    assert store.verify().ok


def test_add_can_index_later_and_searches_still_see_it(store: ExperienceStore) -> None:
    entries = [store.add(make_trajectory(f"t-later-{n}"), index_later=True) for n in range(12)]
    assert all(store.get(e.id).trajectory_id == e.id for e in entries)  # readable at once
    hits = store.search("primes", scope="summaries", filters={"task_id": "task-1"}, k=20)  # waits
    assert {h.trajectory_id for h in hits} == {e.id for e in entries}
    assert store.verify().ok and not store.catalog.query(unindexed=True)


def test_runs_stored_but_not_indexed_before_a_kill_are_searchable_in_the_next_process(tmp_path) -> None:
    killed = ExperienceStore(tmp_path, embedding="hash", index=False)  # files and rows, no index yet
    killed.ingest([make_trajectory(f"t-left-{i}") for i in range(3)])
    killed.close()
    store = ExperienceStore(tmp_path, embedding="hash")
    hits = store.search("primes", scope="summaries", filters={"task_id": "task-1"}, k=10)
    assert {h.trajectory_id for h in hits} == {f"t-left-{i}" for i in range(3)}
    assert store.verify().ok
    store.close()


def test_leftovers_indexed_on_opening_and_a_concurrent_ingest_index_each_run_once(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    killed = ExperienceStore(tmp_path, embedding="hash", index=False)
    killed.ingest([make_trajectory(f"t-left-{i}") for i in range(300)])
    killed.close()
    monkeypatch.setattr(indexer, "QUIET_S", 0.0)  # the pass that opening starts runs at once
    store = ExperienceStore(tmp_path, embedding="hash")
    store.ingest([make_trajectory(f"t-new-{i}") for i in range(300)])  # and races this one
    store.wait_for_index()
    rows = (tmp_path / "chroma" / "vectors").glob("*summaries*.ids")
    ids = [line for path in rows for line in path.read_text().split()[1:]]  # after the dim= header
    assert len(ids) == len(set(ids)) == 600  # every run indexed, none twice
    assert store.verify().ok
    store.close()


def test_a_burst_of_later_adds_is_one_index_write_and_a_search_does_not_wait_for_quiet(
    store: ExperienceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(indexer, "QUIET_S", 60.0)  # no quiet moment comes during this test
    monkeypatch.setattr(indexer, "MAX_DELAY_S", 60.0)
    writes: list[int] = []
    index_add = store.index.add
    monkeypatch.setattr(store.index, "add", lambda trajs: (writes.append(len(trajs)), index_add(trajs)))
    entries = [store.add(make_trajectory(f"t-burst-{n}"), index_later=True) for n in range(10)]
    assert len(store.catalog.query(unindexed=True)) == 10  # waiting for quiet, not written one by one
    assert store.catalog.unindexed(["t-burst-3", "t-nope", "t-burst-7"]) == {"t-burst-3", "t-burst-7"}
    began = time.monotonic()
    hits = store.search("primes", scope="summaries", filters={"task_id": "task-1"}, k=20)
    assert time.monotonic() - began < 30  # the search cut the quiet period short (it would be 60 s)
    assert {h.trajectory_id for h in hits} == {e.id for e in entries}
    assert writes == [10]
