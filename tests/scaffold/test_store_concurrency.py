"""Concurrent writers (threads and processes) and killed writers never corrupt the store."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from recreate.scaffold import AddRule, ScaffoldStore, validate_scaffold
from tests.scaffold.conftest import REPO, make_scaffold


def _writer(root: str, worker: int, edits: int) -> list[str]:
    store = ScaffoldStore(root)
    return [
        store.apply("demo", [AddRule(id=f"w{worker}-{i}", text=f"rule {worker}.{i}")]).ref
        for i in range(edits)
    ]


def assert_consistent(store: ScaffoldStore, expected_versions: int) -> None:
    versions = store.versions("demo")
    assert versions == list(range(1, expected_versions + 1))
    for version in versions:
        info = store.resolve(f"demo@v{version}")
        scaffold = store.load(info.ref)  # checks the content hash
        validate_scaffold(scaffold)
        if info.parent:
            parent = store.resolve(info.parent)
            assert parent.version < version
            assert len(scaffold.rules) == len(store.load(parent.ref).rules) + 1
    assert not [p for p in (store.root / "demo").iterdir() if p.name.startswith(".tmp-")]


def test_threads_never_collide_on_version_numbers(store):
    store.commit(make_scaffold(rules=[]))
    refs: list[str] = []
    errors: list[BaseException] = []

    def run(worker: int) -> None:
        try:
            refs.extend(_writer(str(store.root), worker, 5))
        except BaseException as exc:  # surfaced below: a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(set(refs)) == 40
    assert_consistent(store, 41)


@pytest.mark.slow
def test_processes_never_collide_on_version_numbers(store):
    store.commit(make_scaffold(rules=[]))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.starmap(_writer, [(str(store.root), w, 6) for w in range(4)])
    refs = [ref for batch in results for ref in batch]
    assert len(set(refs)) == 24
    assert_consistent(store, 25)


KILLED_WRITER = textwrap.dedent(
    """
    import sys
    from recreate.scaffold import AddRule, ScaffoldStore
    store = ScaffoldStore(sys.argv[1])
    i = 0
    while True:
        store.apply("demo", [AddRule(id=f"{sys.argv[2]}-{i}", text=f"rule {i}")])
        i += 1
        print(i, flush=True)
    """
)


@pytest.mark.slow
def test_a_killed_writer_leaves_only_whole_versions(store):
    store.commit(make_scaffold(rules=[]))
    for round_, delay in enumerate((0.3, 0.45, 0.6)):
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_WRITER, str(store.root), f"k{round_}"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None and proc.stdout.readline()  # it has committed at least once
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    versions = store.versions("demo")
    assert versions == list(range(1, len(versions) + 1)) and len(versions) > 3
    for version in versions:  # a kill mid-write leaves at most an ignored .tmp- folder, never half a version
        validate_scaffold(store.load(f"demo@v{version}"))
    # the lock died with its holder: the next writer gets the next number
    assert (
        store.apply("demo@latest", [AddRule(id="after", text="after the kills")]).version == versions[-1] + 1
    )
    assert Path(store.root / "demo/HEAD").read_text().strip() == f"v{versions[-1] + 1}"
    assert not list((store.root / "demo").glob(".tmp-*"))  # the next writer cleared what a kill left
