"""Opening a session ahead of need: `open_soon` and `close_when_opened` on a real bubblewrap sandbox."""

from __future__ import annotations

import shutil
import time

import pytest

from recreate.sandbox import close_when_opened, get_sandbox, open_soon
from recreate.sandbox.base import Session

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def wait_closed(session: Session) -> bool:
    deadline = time.monotonic() + 30
    while not session.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    return session.closed


def test_opens_in_the_background_and_prepares_there() -> None:
    opening = open_soon(get_sandbox("bwrap"), then=lambda s: s.put("task.txt", "prepared"))
    session = opening.result(timeout=60)
    try:
        assert session.run("cat task.txt", timeout=30).stdout == "prepared"
    finally:
        session.close()


def test_a_failed_preparation_raises_and_closes_its_session() -> None:
    seen: list[Session] = []

    def prepare(session: Session) -> None:
        seen.append(session)
        raise RuntimeError("the task's files are missing")

    opening = open_soon(get_sandbox("bwrap"), then=prepare)
    with pytest.raises(RuntimeError, match="files are missing"):
        opening.result(timeout=60)
    assert wait_closed(seen[0])
    close_when_opened(opening)  # nothing to close: no error either


def test_an_unused_session_is_closed_once_open() -> None:
    opening = open_soon(get_sandbox("bwrap"))
    close_when_opened(opening)  # possibly before the open finished
    assert wait_closed(opening.result(timeout=60))
