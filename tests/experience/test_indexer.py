"""BackgroundIndexer: passes after quiet, one at a time, a pass for adds that came during one, errors
handed to the waiter."""

from __future__ import annotations

import threading

import pytest

from recreate.experience import indexer
from recreate.experience.indexer import BackgroundIndexer


@pytest.fixture(autouse=True)
def short_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexer, "QUIET_S", 0.05)


def test_an_add_during_a_pass_gets_a_pass_of_its_own() -> None:
    entered, release, passes = threading.Event(), threading.Event(), []

    def sync() -> None:
        passes.append(len(passes))
        if len(passes) == 1:
            entered.set()
            release.wait(30)

    background = BackgroundIndexer(sync)
    background.schedule()
    assert entered.wait(30)
    background.schedule()  # the running pass may have read the catalog before this add
    release.set()
    assert background.wait() is None
    assert passes == [0, 1]


def test_a_failed_pass_is_reported_to_the_waiter_and_the_next_add_tries_again() -> None:
    outcomes = [RuntimeError("index busy"), None]

    def sync() -> None:
        if (outcome := outcomes.pop(0)) is not None:
            raise outcome

    background = BackgroundIndexer(sync)
    background.schedule()
    assert str(background.wait()) == "index busy"
    background.schedule()
    assert background.wait() is None and outcomes == []
