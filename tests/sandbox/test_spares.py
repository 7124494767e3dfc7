"""Spare sessions: a backend object opens the next session of a spec it is asked for again ahead of need,
and hands out nothing a caller could tell from a fresh open (real bubblewrap)."""

from __future__ import annotations

import pickle
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from recreate.sandbox import SandboxSpec, get_sandbox
from recreate.sandbox import spares as spares_module
from recreate.sandbox.base import SandboxError, Session
from recreate.sandbox.bwrap import BwrapSandbox
from recreate.sandbox.spares import ASKS_BEFORE_SPARES, MAX_SPECS, Spares

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def ready_spare(spares: Spares, spec: SandboxSpec) -> Session:
    future: Future[Session] = spares._ready[repr(spec)][0]
    return future.result(timeout=60)


def wait_closed(session: Session) -> bool:
    deadline = time.monotonic() + 30
    while not session.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    return session.closed


def test_a_spec_asked_for_again_is_served_by_a_spare_as_fresh_as_an_open() -> None:
    sandbox = BwrapSandbox()
    spec = SandboxSpec(env={"WHO": "spare"})
    earlier = [sandbox.open(spec) for _ in range(ASKS_BEFORE_SPARES - 1)]
    assert not sandbox._spares._ready  # asked a few times only: no spare
    earlier.append(sandbox.open(spec))
    spare = ready_spare(sandbox._spares, spec)
    try:
        for session in earlier:
            session.run("echo used > mark; sleep 300 &", timeout=30)
        third = sandbox.open(spec)
        assert third is spare and third not in earlier
        result = third.run('ls -A; ls -A /tmp | grep -v "^.recreate"; echo "$WHO"; pgrep sleep', timeout=30)
        assert result.stdout.split() == ["spare"]  # no files, no processes of the others; its spec's env
        assert ready_spare(sandbox._spares, spec) is not third  # the next one is on its way
    finally:
        for session in (*earlier, spare):
            session.close()
        sandbox.close_spares()


def test_other_specs_get_their_own_spares_and_closing_them_closes_every_one() -> None:
    sandbox = BwrapSandbox()
    specs = [SandboxSpec(env={"N": str(n)}) for n in range(3)]
    for spec in specs * ASKS_BEFORE_SPARES:
        sandbox.open(spec).close()
    spares = [ready_spare(sandbox._spares, spec) for spec in specs]
    assert [s.run("echo $N", timeout=30).stdout.strip() for s in spares] == ["0", "1", "2"]
    sandbox.close_spares()
    assert all(wait_closed(s) for s in spares)
    fresh = sandbox.open(specs[0])  # after closing, the next open is a plain one
    assert fresh not in spares
    fresh.close()


def test_the_least_recently_asked_spec_loses_its_spare_beyond_the_limit() -> None:
    sandbox = BwrapSandbox()
    oldest = SandboxSpec(env={"N": "old"})
    for _ in range(ASKS_BEFORE_SPARES):
        sandbox.open(oldest).close()
    spare = ready_spare(sandbox._spares, oldest)
    for n in range(MAX_SPECS):
        sandbox.open(SandboxSpec(env={"N": str(n)})).close()
    assert repr(oldest) not in sandbox._spares._ready and wait_closed(spare)
    sandbox.close_spares()


def test_a_spare_that_failed_to_open_leaves_the_caller_to_open_its_own() -> None:
    backend = BwrapSandbox()
    calls: list[str] = []

    def open_session(spec: SandboxSpec | None) -> Session:
        calls.append("open")
        if len(calls) == ASKS_BEFORE_SPARES + 1:  # the first spare's open: a machine hiccup
            raise SandboxError("the keeper did not start")
        return backend._open_now(spec)

    spares, spec = Spares(open_session), SandboxSpec()
    opened = [spares.open(spec) for _ in range(ASKS_BEFORE_SPARES)]  # the last asks for the first spare
    with pytest.raises(SandboxError):
        spares._ready[repr(spec)][0].result(timeout=60)
    after = spares.open(spec)  # the failed spare is dropped: this caller opens its own, then a spare
    assert after.run("true", timeout=30).ok and len(calls) >= ASKS_BEFORE_SPARES + 2
    for session in [*opened, after]:
        session.close()
    spares.close()


def test_a_caller_whose_own_open_fails_gets_that_error() -> None:
    sandbox = BwrapSandbox(base_dir="/nonexistent/recreate-sessions")
    for _ in range(ASKS_BEFORE_SPARES + 1):
        with pytest.raises(SandboxError, match="base_dir"):
            sandbox.open(SandboxSpec())
    sandbox.close_spares()


def test_get_sandbox_gives_each_caller_its_own_spares() -> None:
    first, second = get_sandbox("bwrap"), get_sandbox("bwrap")
    assert first._spares is not second._spares  # type: ignore[attr-defined]


def test_a_pickled_bwrap_backend_opens_its_own_sessions_and_shares_no_spares() -> None:
    """A copy (what a Ray worker gets) starts with no spares of the original's."""
    sandbox, spec = BwrapSandbox(), SandboxSpec(env={"WHO": "copied"})
    for _ in range(ASKS_BEFORE_SPARES):
        sandbox.open(spec).close()
    spare = sandbox._spares._ready[repr(spec)][0].result(timeout=60)
    copy = pickle.loads(pickle.dumps(sandbox))
    try:
        with copy.open(spec) as session:
            assert session is not spare and session.run('echo "$WHO"', timeout=30).stdout == "copied\n"
        assert sandbox.open(spec) is spare
    finally:
        spare.close()
        copy.close_spares()
        sandbox.close_spares()


def test_a_burst_of_callers_keeps_more_spares_of_its_spec_ready_for_the_next_burst(monkeypatch) -> None:
    """Concurrent tasks ask for a spec at once: a caller who finds its spares all still opening keeps one
    more of them from then on, so the next burst is served by spares (up to MAX_DEPTH, MAX_SPARES)."""
    monkeypatch.setattr(spares_module, "MAX_DEPTH", 3)
    backend, spec, burst = BwrapSandbox(), SandboxSpec(env={"WHO": "burst"}), 4
    opened: list[Session] = []

    def slow_open(asked: SandboxSpec | None) -> Session:
        time.sleep(0.3)  # slower than a burst's callers are apart
        session = backend._open_now(asked)
        opened.append(session)
        return session

    spares = Spares(slow_open)
    try:
        for _ in range(ASKS_BEFORE_SPARES):
            spares.open(spec).close()
        with ThreadPoolExecutor(burst) as pool:
            first = list(pool.map(lambda _: spares.open(spec), range(burst)))
        assert len(spares._ready[repr(spec)]) == 3  # one, then one more per miss, up to MAX_DEPTH
        ready = [future.result(timeout=60) for future in spares._ready[repr(spec)]]
        with ThreadPoolExecutor(burst) as pool:
            second = list(pool.map(lambda _: spares.open(spec), range(burst)))
        assert sum(session in ready for session in second) == 3 and len(set(map(id, second))) == burst
        assert all(s.run('echo "$WHO"', timeout=30).stdout == "burst\n" for s in first + second)
        monkeypatch.setattr(spares_module, "MAX_SPARES", 1)  # in all, over every spec
        other = SandboxSpec(env={"WHO": "other"})
        for _ in range(ASKS_BEFORE_SPARES):
            spares.open(other).close()
        assert not spares._ready[repr(other)]  # the burst's spec holds the only place
    finally:
        spares.close()
        for session in opened:
            session.close()
    assert all(wait_closed(session) for session in opened)


def test_a_spare_that_opened_is_handed_out_before_one_that_failed_is_dropped() -> None:
    backend, spec = BwrapSandbox(), SandboxSpec()
    spares = Spares(backend._open_now)
    for _ in range(ASKS_BEFORE_SPARES - 1):
        spares.open(spec).close()
    failed: Future[Session] = Future()
    failed.set_exception(SandboxError("the keeper did not start"))
    good: Future[Session] = Future()
    good.set_result(backend._open_now(spec))
    spares._ready[repr(spec)] = [failed, good]
    try:
        assert spares.open(spec) is good.result()  # not an open of its own for the failed one
        assert failed not in spares._ready[repr(spec)]
    finally:
        good.result().close()
        spares.close()
