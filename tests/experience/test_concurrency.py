"""Concurrent writers and crashes: nothing is lost, nothing is duplicated, the index catches up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from recreate.experience.schema import load_trajectory
from recreate.experience.store import ExperienceStore, IngestReport
from tests.experience.factory import make_trajectory
from tests.experience.ingest_worker import ids_to_store

REPO = Path(__file__).resolve().parents[2]
SHARED = 5


def _worker(
    root: Path, prefix: str, count: int, report: Path | None = None, bulk: bool = False
) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "tests.experience.ingest_worker", str(root), prefix, str(count)]
    cmd += ["--bulk"] if bulk else []
    if report is not None:
        cmd += ["--shared", str(SHARED), "--report", str(report)]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_16_threads_and_4_processes_lose_and_duplicate_nothing(
    store: ExperienceStore, tmp_path: Path
) -> None:
    per_thread, per_process = 6, 8
    procs = [_worker(store.root, f"p{n}", per_process, tmp_path / f"p{n}.json") for n in range(4)]
    reports: list[IngestReport] = []
    lock = threading.Lock()

    def thread_body(n: int) -> None:
        for trajectory_id in ids_to_store(f"t{n}", per_thread, SHARED):
            report = store.ingest([make_trajectory(trajectory_id)])
            with lock:
                reports.append(report)

    threads = [threading.Thread(target=thread_body, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err

    added = [i for r in reports for i in r.added]
    duplicates = [i for r in reports for i in r.duplicates]
    for n in range(4):
        worker = json.loads((tmp_path / f"p{n}.json").read_text())
        added += worker["added"]
        duplicates += worker["duplicates"]

    expected = {f"t{n}-{i}" for n in range(16) for i in range(per_thread)}
    expected |= {f"p{n}-{i}" for n in range(4) for i in range(per_process)}
    expected |= {f"shared-{i}" for i in range(SHARED)}
    assert sorted(added) == sorted(expected)  # every id stored exactly once
    assert sorted(duplicates) == sorted(f"shared-{i}" for i in range(SHARED) for _ in range(19))
    assert {e.id for e in store.list()} == expected
    files = sorted(store.files.glob("*/*.json"))
    assert {p.stem for p in files} == expected
    assert all(load_trajectory(p).trajectory_id == p.stem for p in files)
    assert not list(store.files.glob("*/.*.tmp"))
    store.sync_index()  # entries of processes that did not own the index
    assert store.verify().ok, store.verify().lines()


@pytest.mark.slow
def test_index_equals_catalog_after_kill_mid_ingest_and_reindex(store: ExperienceStore) -> None:
    # This process stays off the index until the end, so the killed worker owns it and dies mid-write.
    first = _worker(store.root, "before", 2)
    assert first.wait(timeout=120) == 0
    proc = _worker(store.root, "killed", 10_000, bulk=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("stored 40"):
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)

    files = {p.stem for p in store.files.glob("*/*.json")}
    assert {"before-0", "before-1"} <= files
    assert len(files) >= 42
    # killed before its first index batch; opening the index picks up what it stored but never indexed
    assert not store.verify().missing_in_index
    report = store.reindex()
    assert not report.errors
    assert {e.id for e in store.list()} == files  # the catalog is exactly the files
    drift = store.verify()
    assert drift.ok, drift.lines()
    assert store.index.ids("summaries") == files
    assert all(load_trajectory(store.files / "ds1000" / f"{i}.json").trajectory_id == i for i in files)
