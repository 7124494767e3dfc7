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


def test_a_failed_pass_is_tried_again_and_only_the_last_failure_reaches_the_waiter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(indexer, "RETRY_S", (0.01, 0.01))
    outcomes: list[Exception | None] = [RuntimeError("busy"), None]

    def sync() -> None:
        if (outcome := outcomes.pop(0)) is not None:
            raise outcome

    background = BackgroundIndexer(sync)
    background.schedule()
    assert background.wait() is None and outcomes == []  # the second try indexed it

    outcomes += [RuntimeError("busy"), RuntimeError("still busy"), RuntimeError("index busy"), None]
    background.schedule()
    assert str(background.wait()) == "index busy"  # three tries, then given up
    background.schedule()  # the next add tries again
    assert background.wait() is None and outcomes == []


def test_a_waiter_is_not_kept_waiting_for_quiet_by_an_add_during_the_pass_it_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(indexer, "QUIET_S", 600.0)
    monkeypatch.setattr(indexer, "MAX_DELAY_S", 600.0)
    passes: list[int] = []
    background = BackgroundIndexer(lambda: passes.append(1) or (len(passes) == 1 and background.schedule()))
    background.schedule()
    done = threading.Thread(target=background.wait)
    done.start()
    done.join(30)  # the second pass (for the add the first made) runs at once too, not after 600 s
    assert not done.is_alive() and passes == [1, 1]
