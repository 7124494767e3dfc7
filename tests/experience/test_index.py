"""The Chroma index: filters, registered embeddings, MiniLM semantics, server mode."""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import chromadb
import numpy as np
import pytest
from chromadb.config import Settings

from recreate.experience.embeddings import HashEmbedding, MiniLMEmbedding, make_embedding
from recreate.experience.index import ExperienceIndex
from recreate.experience.store import ExperienceStore
from tests.experience.factory import TRACEBACK, bash_step, make_trajectory


def _failing_run(trajectory_id: str, task_id: str = "task-9") -> object:
    steps = [
        bash_step(0, "pip install pandas", stdout="Successfully installed pandas"),
        bash_step(1, "python solve.py", stderr=TRACEBACK, exit_code=1),
        bash_step(
            2,
            "python -c 'import missing_mod'",
            stderr="ModuleNotFoundError: No module named 'missing_mod'",
            exit_code=1,
        ),
    ]
    return make_trajectory(trajectory_id, task_id=task_id, passed=False, steps=steps)


def test_step_metadata_supports_filters(store: ExperienceStore) -> None:
    store.ingest(
        [_failing_run("t-fail"), make_trajectory("t-ok", task_id="task-9"), make_trajectory("t-other")]
    )
    hits = store.search("python", filters={"error_type": "ZeroDivisionError"}, k=5)
    assert [(h.trajectory_id, h.metadata["step"]) for h in hits] == [("t-fail", 1)]
    hits = store.search("python solve", filters={"task_id": "task-9", "outcome": "passed"}, k=10)
    assert hits and {h.trajectory_id for h in hits} == {"t-ok"}
    summaries = store.search("wrong output", scope="summaries", filters={"domain": "ds1000"}, k=1)
    assert summaries[0].id == "t-fail"
    with pytest.raises(ValueError, match="unknown filter"):
        store.search("x", scope="summaries", filters={"error_type": "x"})


def test_hash_embedding_is_deterministic_and_normalised() -> None:
    emb = HashEmbedding()
    a, b = emb(["python solve.py failed", "python solve.py failed"])
    assert np.allclose(a, b) and np.isclose(np.linalg.norm(a), 1.0)
    (empty,) = emb([""])
    assert not np.any(empty)
    with pytest.raises(ValueError, match="unknown embedding"):
        make_embedding("word2vec")


def test_registered_embedding_reopens_from_the_persisted_config(tmp_path: Path) -> None:
    index = ExperienceIndex(tmp_path / "chroma", embedding="hash")
    index.add([make_trajectory("t-1")])
    name = index.collection_name("steps")
    del index
    raw = chromadb.PersistentClient(
        path=str(tmp_path / "chroma"), settings=Settings(anonymized_telemetry=False)
    )
    collection = raw.get_collection(name)  # no embedding function passed: rebuilt from its registration
    assert collection.configuration_json["embedding_function"]["name"] == "recreate-hash"
    # query_texts embeds with the registered function (Chroma's default would need a download)
    found = collection.query(query_texts=["python solve.py --case 2"], n_results=1)
    assert found["ids"][0] == ["t-1#2"]


@pytest.mark.slow
def test_minilm_finds_a_paraphrase_that_shares_no_words(tmp_path: Path, minilm_models: Path) -> None:
    store = ExperienceStore(tmp_path, embedding=MiniLMEmbedding(cache_dir=minilm_models))
    docs = {
        "t-disk": "cp data.tar /mnt/backup\n[exit 1]\nwrite error: No space left on device",
        "t-net": "curl http://example.org/data.csv\n[exit 6]\ncurl: (6) Could not resolve host: example.org",
        "t-perm": "cat /root/secret.txt\n[exit 1]\ncat: /root/secret.txt: Permission denied",
    }
    store.ingest(
        make_trajectory(i, steps=[bash_step(0, text.split("\n")[0], stderr=text.split("\n")[2], exit_code=1)])
        for i, text in docs.items()
    )
    query = "the storage volume is full"
    assert not set(query.lower().split()) & set(" ".join(docs.values()).lower().split())
    assert store.search(query, k=1)[0].trajectory_id == "t-disk"
    assert store.search("access was forbidden for this user", k=1)[0].trajectory_id == "t-perm"
    assert isinstance(store.index.embedding, MiniLMEmbedding)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def chroma_server(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    chroma = Path(sys.executable).with_name("chroma")
    proc = subprocess.Popen(
        [str(chroma), "run", "--host", "127.0.0.1", "--port", str(port), "--path", str(tmp_path / "server")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                chromadb.HttpClient(host="127.0.0.1", port=port).heartbeat()
                break
            except Exception:
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_server_mode_uses_the_http_client(tmp_path: Path, chroma_server: str) -> None:
    store = ExperienceStore(tmp_path / "exp", embedding="hash", chroma_url=chroma_server)
    store.ingest([_failing_run("t-srv"), make_trajectory("t-ok")])
    assert not (tmp_path / "exp" / "chroma").exists()  # nothing embedded: the vectors live in the server
    port = int(chroma_server.rsplit(":", 1)[1])
    server_view = chromadb.HttpClient(host="127.0.0.1", port=port)
    assert server_view.get_collection(store.index.collection_name("steps")).count() == 3 + 4
    assert store.search("division by zero", k=1)[0].trajectory_id == "t-srv"
    assert store.verify().ok
    # every server search is an HNSW search: its graph is built for recall; an embedded one keeps defaults
    hnsw = server_view.get_collection(store.index.collection_name("steps")).configuration["hnsw"]
    assert (hnsw["max_neighbors"], hnsw["ef_construction"], hnsw["ef_search"]) == (48, 400, 400)
    embedded = ExperienceStore(tmp_path / "local", embedding="hash")
    assert embedded.index.collection("steps").configuration["hnsw"]["max_neighbors"] == 16


@pytest.mark.parametrize("brute_force_limit", [1000, 0])  # 0: filter the nearest ids first
@pytest.mark.parametrize(
    "filters",
    [
        {"task_id": "task-3"},
        {"domain": "math"},
        {"error_type": "KeyError"},  # rare: the wide path often finds too few and Chroma filters
        {"error_type": "KeyError", "outcome": "failed"},
        {"domain": "swe", "step": 2},
    ],
)
def test_filtered_search_matches_chromas_own_filtering(
    store: ExperienceStore, filters: dict, brute_force_limit: int
) -> None:
    store.index.brute_force_limit = brute_force_limit
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    trajectories = []
    for n in range(60):
        steps = [
            bash_step(
                i, f"python run.py {words[(n + i) % 6]} {words[(n * i) % 6]}", stdout=f"out {words[i % 6]}"
            )
            if (n + i) % 17
            else bash_step(i, "python load.py", stderr="KeyError: 'price'", exit_code=1)
            for i in range(20)
        ]
        domain = ("ds1000", "math", "swe")[n % 3]
        trajectories.append(
            make_trajectory(f"t-{n}", task_id=f"task-{n % 7}", domain=domain, passed=n % 2 == 0, steps=steps)
        )
    store.ingest(trajectories)
    index = store.index
    collection = index.collection("steps")
    where = {"$and": [{k: v} for k, v in filters.items()]} if len(filters) > 1 else filters
    matching = collection.get(where=where, include=["embeddings"])["embeddings"]
    for query in ("python run alpha gamma", "load price error", "out sigma"):
        ours = store.search(query, filters=filters, k=5)
        vector = np.asarray(index.embedding.embed_query([query])[0])
        # ground truth: exact cosine distances over every matching step (Chroma's own filtered query
        # is approximate HNSW, so it is not the reference)
        exact = sorted(1 - (e @ vector) / (np.linalg.norm(e) * np.linalg.norm(vector)) for e in matching)[:5]
        got = [round(h.distance, 4) for h in ours]
        if brute_force_limit:  # exact scores of the documents the catalog says match
            assert got == [round(float(d), 4) for d in exact]
        else:  # nearest ids filtered in the catalog ride on the approximate index: never beat exact
            assert got == sorted(got) and len(got) == 5 and got[0] >= round(float(exact[0]), 4)
        assert all(all(h.metadata[k] == v for k, v in filters.items()) for h in ours)
        assert all(h.document.startswith("python") for h in ours)


def test_catalog_answers_step_filters_and_old_catalogs_are_backfilled(tmp_path: Path) -> None:
    store = ExperienceStore(tmp_path / "exp", embedding="hash")
    store.ingest([_failing_run("t-fail"), make_trajectory("t-ok", task_id="task-9"), make_trajectory("t-x")])
    catalog = store.catalog
    assert catalog.matching("steps", {"error_type": "ZeroDivisionError"}) == ["t-fail#1"]
    failing_imports = {"outcome": "failed", "error_type": "ModuleNotFoundError"}
    assert catalog.count_matching("steps", failing_imports, 99) == 1
    assert catalog.count_matching("steps", {"task_id": "task-9"}, 99) == 3 + len(store.get("t-ok").steps)
    assert catalog.count_matching("steps", {"task_id": "task-9"}, 2) == 2  # counts no further
    assert catalog.keep_matching("steps", {"step": 2}, ["t-fail#2", "t-fail#1", "t-ok#0"]) == {"t-fail#2"}
    assert catalog.keep_matching("summaries", {"outcome": "passed"}, ["t-fail", "t-ok"]) == {"t-ok"}
    with pytest.raises(ValueError, match="cannot filter scope 'summaries'"):
        catalog.matching("summaries", {"error_type": "KeyError"})
    # a catalog from before the steps table: no step rows, user_version 0
    with sqlite3.connect(catalog.path) as db:
        db.execute("DELETE FROM steps")
        db.execute("PRAGMA user_version = 0")
    store.close()
    reopened = ExperienceStore(tmp_path / "exp", embedding="hash")
    assert not reopened.catalog.needs_step_rows()
    hits = reopened.search("python", filters={"error_type": "ZeroDivisionError"}, k=5)
    assert [h.id for h in hits] == ["t-fail#1"]
    reopened.close()


def test_reindex_rebuilds_step_rows(store: ExperienceStore) -> None:
    store.ingest([_failing_run("t-fail")])
    with sqlite3.connect(store.catalog.path) as db:
        db.execute("DELETE FROM steps")
    assert store.catalog.matching("steps", {"error_type": "ZeroDivisionError"}) == []
    store.reindex()
    assert store.catalog.matching("steps", {"error_type": "ZeroDivisionError"}) == ["t-fail#1"]


def _open_fds() -> int:
    gc.collect()  # Chroma's reference cycles hold its files until the collector runs
    return len(os.listdir("/proc/self/fd"))


def test_closing_the_last_index_of_a_directory_gives_up_its_ownership(tmp_path: Path) -> None:
    def cycle(path: Path) -> None:
        index = ExperienceIndex(path, embedding="hash")
        index.add([make_trajectory("t-1")])  # a write: takes the directory's owner lock
        index.close()

    cycle(tmp_path / "chroma-0")
    settled = _open_fds()
    for n in range(1, 51):  # a long-lived process (an evolve run, `recreate ui`) opening many homes
        cycle(tmp_path / f"chroma-{n}")
    assert _open_fds() <= settled + 2  # was one lock fd per directory, held until the process exited

    first, second = (ExperienceIndex(tmp_path / "chroma-0", embedding="hash") for _ in range(2))
    assert first.writable() and second.writable()
    lock = os.open(tmp_path / "chroma-0.owner.lock", os.O_RDWR)
    try:
        first.close()
        with pytest.raises(BlockingIOError):  # `second` is still open: this process still owns it
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        second.close()
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free for another process now
    finally:
        os.close(lock)


class SlowToFingerprint(HashEmbedding):
    """The hashing embedding, naming its weights slowly (as MiniLM's hashing of its files does)."""

    def fingerprint(self) -> str:
        time.sleep(0.2)
        return super().fingerprint()


def test_threads_writing_a_fresh_index_at_once_share_one_vector_cache(tmp_path: Path) -> None:
    cache = tmp_path / "vector-cache.sqlite"

    def cache_files() -> int:  # this test's own (an earlier test's garbage may hold another cache open)
        found = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                found += os.readlink(f"/proc/self/fd/{fd}") == str(cache.resolve())
        return found

    index = ExperienceIndex(tmp_path / "chroma", embedding=SlowToFingerprint(), vector_cache=cache)
    gc.disable()  # a lost cache's connection would otherwise close whenever the collector runs
    try:
        writers = [threading.Thread(target=index.add, args=([make_trajectory(f"t-{n}")],)) for n in range(6)]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        assert cache_files() == 1  # was one connection per thread, all but one never closed
        assert len(index.collection("summaries").get()["ids"]) == 6
        index.close()
        assert cache_files() == 0
    finally:
        gc.enable()
