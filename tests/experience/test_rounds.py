"""Indexing off the critical path: an evolve round's searches never wait for that round's runs to be
embedded, yet see every finished run of the earlier rounds; what is stored is indexed on close, after a
kill (on the next opening) and after failures (logged, tried again), never lost.

Real embedded Chroma stores with the hashing embedding (the default MiniLM costs a model load per
test; the benchmark, benchmarks/indexing_overhead.py, measures with it).
"""

from __future__ import annotations

import logging
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recreate.domains import get_domain
from recreate.experience import indexer
from recreate.experience.embeddings import HashEmbedding
from recreate.experience.store import ExperienceStore
from recreate.optimizer import EvolveConfig, ReCreateOptimizer
from recreate.testing import Reply, tool_call
from tests.experience.factory import make_trajectory
from tests.optimizer import script

REPO = Path(__file__).resolve().parents[2]
SEARCH = {"query": "the answer", "scope": "summaries", "k": 50}


@pytest.fixture
def no_quiet_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Background passes run only when someone asks for the index (a flush, close or waiting search)."""
    monkeypatch.setattr(indexer, "QUIET_S", 600.0)
    monkeypatch.setattr(indexer, "MAX_DELAY_S", 600.0)


def searched_ids(store: ExperienceStore) -> set[str]:
    return {h.trajectory_id for h in store.search("primes", scope="summaries", k=50)}


def test_each_rounds_searches_see_every_run_of_the_earlier_rounds(
    recreate_home: Path, openai_server: Any, no_quiet_moment: None
) -> None:
    seen: dict[str, str] = {}  # the reflected run -> what its first search printed

    def responder(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        if "ReCreate-Agent" not in str(messages[0].get("content")):
            return script.responder(body)
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            return tool_call("search_experience", SEARCH)
        if turn == 1:
            brief = next(str(m["content"]) for m in messages if m["role"] == "user")
            seen[re.search(r"trajectory id\): (\S+?)\.", brief).group(1)] = str(messages[-1]["content"])
        return script._reflect(messages, turn - 1)

    openai_server.responder = responder
    domain = get_domain("jsonl", data=script.WORDS / "tasks.jsonl", evaluator=script.EVALUATOR)
    store = ExperienceStore(recreate_home / "experience", embedding="hash")
    opt = ReCreateOptimizer(
        optimizer_model=f"scripted@{openai_server.url}",
        agent_model=f"scripted@{openai_server.url}",
        sandbox="bwrap",
        max_concurrency=4,
        home=recreate_home,
        experience=store,
        config=EvolveConfig(rounds=3, batch_size=2, test_seeds=0),
    )
    result = opt.optimize(
        seed=REPO / "scaffolds" / "minimal",
        domain=domain,
        trainset=domain.tasks("train"),
        valset=domain.tasks("val"),
    )
    assert result.finished and len(seen) == 6
    for run in result.results:
        earlier = {r["trajectory_id"] for r in result.results if r["round"] < run["round"]}
        same = {r["trajectory_id"] for r in result.results if r["round"] == run["round"]}
        shown = {t for t in earlier | same if t in seen[run["trajectory_id"]]}
        assert shown == earlier  # all of the earlier rounds; none of its own (not indexed yet: no wait)
    store.close()
    assert store.verify().ok  # closing indexed the last round's runs
    store.close()


def test_runs_added_for_later_are_indexed_on_close(tmp_path: Path, no_quiet_moment: None) -> None:
    store = ExperienceStore(tmp_path, embedding="hash")
    store.search_waits = False
    ids = {store.add(make_trajectory(f"t-{i}"), index_later=True).id for i in range(5)}
    assert searched_ids(store) == set()  # a search that does not wait sees what is indexed: nothing yet
    store.close()
    reopened = ExperienceStore(tmp_path, embedding="hash", index=False)  # indexes nothing on opening
    assert not reopened.catalog.query(unindexed=True) and searched_ids(reopened) == ids
    reopened.close()


KILLED_WRITER = """
import sys, time
from recreate.experience import indexer
from recreate.experience.store import ExperienceStore
from tests.experience.factory import make_trajectory
indexer.QUIET_S = indexer.MAX_DELAY_S = 600.0
store = ExperienceStore(sys.argv[1], embedding="hash")
for i in range(7):
    store.add(make_trajectory(f"t-killed-{i}"), index_later=True)
print("stored", flush=True)
time.sleep(600)
"""


def test_runs_stored_by_a_killed_process_are_indexed_by_the_next_flush(tmp_path: Path) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "stored"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
        writer.stdout.close()  # type: ignore[union-attr]
    store = ExperienceStore(tmp_path, embedding="hash")
    store.search_waits = False  # as in an evolve loop resumed after the kill
    assert len(store.catalog.query(unindexed=True)) == 7
    assert store.flush_index() == 0
    assert searched_ids(store) == {f"t-killed-{i}" for i in range(7)} and store.verify().ok
    store.close()


class FlakyHash(HashEmbedding):
    """The hashing embedding, failing its next `failures` calls (a busy or broken embedding service)."""

    failures = 0

    def __call__(self, input: list[str]) -> list[np.ndarray]:  # type: ignore[override]
        if FlakyHash.failures:
            FlakyHash.failures -= 1
            raise RuntimeError("embedding service unavailable")
        return super().__call__(input)

    @staticmethod
    def name() -> str:
        return "flaky-hash"


def test_a_failed_index_pass_is_reported_and_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, no_quiet_moment: None
) -> None:
    monkeypatch.setattr(indexer, "RETRY_S", (0.01, 0.01, 0.01))
    store = ExperienceStore(tmp_path, embedding=FlakyHash(), vector_cache=False)
    store.search_waits = False
    ids = {store.add(make_trajectory(f"t-{i}"), index_later=True).id for i in range(4)}
    FlakyHash.failures = 2
    with caplog.at_level(logging.WARNING):
        assert store.flush_index() == 0  # two failures, then the third try indexed them
    assert caplog.text.count("experience indexing failed, trying again") == 2
    assert searched_ids(store) == ids

    later = {store.add(make_trajectory(f"t-later-{i}"), index_later=True).id for i in range(3)}
    FlakyHash.failures = 100  # down for good: every try fails
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert store.flush_index() == 3
    assert "left for later" in caplog.text and "3 stored runs are not indexed yet" in caplog.text
    FlakyHash.failures = 0  # back up: the next flush indexes what the failed ones left
    assert store.flush_index() == 0
    assert searched_ids(store) == ids | later and store.verify().ok
    store.close()


def test_a_flush_for_given_runs_waits_only_while_one_of_them_is_not_indexed(
    tmp_path: Path, no_quiet_moment: None
) -> None:
    store = ExperienceStore(tmp_path, embedding="hash")
    store.search_waits = False
    store.add(make_trajectory("t-train"))  # indexed as it is stored
    store.add(make_trajectory("t-held-out"), index_later=True)  # waits for a quiet moment (none comes)
    assert store.flush_index(["t-train"]) == 0
    assert store.catalog.unindexed(["t-train", "t-held-out"]) == {"t-held-out"}  # left to the background
    assert store.flush_index(["t-train", "t-held-out"]) == 0
    assert searched_ids(store) == {"t-train", "t-held-out"}
    store.close()
