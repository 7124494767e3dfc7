"""Spare sessions under attack (real bubblewrap): many threads at once, a slow or hung background open,
a spare that died while it waited, a forked child, a backend dropped or a process ended without
`close_spares`."""

from __future__ import annotations

import gc
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from recreate.sandbox import SandboxSpec
from recreate.sandbox.base import Session
from recreate.sandbox.bwrap import BwrapSandbox
from recreate.sandbox.host import UID_FILE, uid_processes
from recreate.sandbox.spares import ASKS_BEFORE_SPARES, Spares
from tests.sandbox.test_spares import ready_spare

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
REPO = Path(__file__).resolve().parents[2]
THREADS = 16


def session_uids(base_dir: Path) -> set[int]:
    return {int(p.read_text()) for p in base_dir.glob(f"*/{UID_FILE}") if p.read_text().strip()}


def nothing_left(base_dir: Path, uids: set[int], within: float = 30) -> bool:
    """Every session directory under `base_dir` removed and no process of `uids` running."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        uids |= session_uids(base_dir)
        if not any(base_dir.iterdir()) and not any(uid_processes(uid) for uid in uids):
            return True
        time.sleep(0.05)
    return False


FRESH_CHECK = 'ls -A; ls -A /tmp | grep -v "^.recreate"; echo "$WHO"; touch mine; sleep 60 &'


def open_together(sandbox: BwrapSandbox, spec: SandboxSpec) -> list[tuple[Session, str]]:
    """THREADS callers open `spec` at the same moment; each runs FRESH_CHECK in what it got."""
    barrier = threading.Barrier(THREADS)

    def one(_: int) -> tuple[Session, str]:
        barrier.wait()
        session = sandbox.open(spec)
        return session, session.run(FRESH_CHECK, timeout=60).stdout

    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(one, range(THREADS)))


def test_threads_opening_one_spec_at_once_get_distinct_fresh_sessions(public_dir: Path) -> None:
    sandbox, spec = BwrapSandbox(base_dir=str(public_dir)), SandboxSpec(env={"WHO": "hammer"})
    handed: list[Session] = []
    uids: set[int] = set()
    for _ in range(4):  # rounds: the first makes spares, the later ones race for them
        got = open_together(sandbox, spec)
        sessions = [session for session, _ in got]
        assert [out.split() for _, out in got] == [["hammer"]] * THREADS  # each as fresh as a new one
        assert len({id(s) for s in sessions}) == THREADS and len({s.root for s in sessions}) == THREADS
        assert not any(any(s is old for old in handed) for s in sessions)  # closed ones never come back
        uids |= session_uids(public_dir)
        for session in sessions:
            session.close()
        handed += sessions
    sandbox.close_spares()
    assert nothing_left(public_dir, uids)  # the spares too: no directory, no process of any session


def slow_in_background(backend: BwrapSandbox, release: threading.Event) -> Spares:
    """Spares whose background opens hang until `release` (a stuck engine); callers' own opens do not."""

    def open_session(spec: SandboxSpec | None) -> Session:
        if threading.current_thread().name.startswith("recreate-sandbox-open"):
            release.wait(20)
        return backend._open_now(spec)

    return Spares(open_session)


def test_no_caller_waits_for_a_spare_still_opening() -> None:
    release, spec = threading.Event(), SandboxSpec()
    spares = slow_in_background(BwrapSandbox(), release)
    opened = [spares.open(spec) for _ in range(ASKS_BEFORE_SPARES)]  # the last asks for a spare: it hangs
    try:
        started = time.monotonic()
        opened += [spares.open(spec) for _ in range(3)]
        assert time.monotonic() - started < 10  # three opens of their own, not the hung spare's 20 s
        assert all(s.run("true", timeout=30).ok for s in opened)
    finally:
        release.set()
        for session in opened:
            session.close()
        spares.close()


def test_a_spare_that_died_while_it_waited_is_not_handed_out() -> None:
    sandbox, spec = BwrapSandbox(), SandboxSpec()
    for _ in range(ASKS_BEFORE_SPARES):
        sandbox.open(spec).close()
    spare = ready_spare(sandbox._spares, spec)
    os.kill(spare._keeper.pid, signal.SIGKILL)  # the OOM killer, an admin: while it sat idle
    spare._keeper.wait(timeout=30)
    session = sandbox.open(spec)
    try:
        assert session is not spare and session.run("echo ok", timeout=30).stdout == "ok\n"
    finally:
        session.close()
        sandbox.close_spares()


def test_a_spare_is_built_from_the_spec_as_it_was_asked_for() -> None:
    release = threading.Event()
    spares = slow_in_background(BwrapSandbox(), release)
    spec = SandboxSpec(env={"WHO": "asked"})
    opened = [spares.open(spec) for _ in range(ASKS_BEFORE_SPARES)]
    spec.env["WHO"] = "changed later"  # a frozen spec's dict is still mutable
    release.set()
    asked = SandboxSpec(env={"WHO": "asked"})
    spares._ready[repr(asked)][0].result(timeout=60)
    session = spares.open(asked)
    try:
        assert session.spec == asked and session.run('echo "$WHO"', timeout=30).stdout == "asked\n"
    finally:
        for s in [*opened, session]:
            s.close()
        spares.close()


def test_a_forked_child_cannot_close_or_take_its_parents_spares() -> None:
    sandbox, spec = BwrapSandbox(), SandboxSpec()
    for _ in range(ASKS_BEFORE_SPARES):
        sandbox.open(spec).close()
    spare = ready_spare(sandbox._spares, spec)
    child = multiprocessing.get_context("fork").Process(target=sandbox.close_spares)
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0
    session = sandbox.open(spec)
    try:
        assert session is spare and session.run("echo ok", timeout=30).stdout == "ok\n"
    finally:
        session.close()
        sandbox.close_spares()


def test_a_backend_dropped_without_close_spares_closes_its_spares_at_once(public_dir: Path) -> None:
    sandbox, spec = BwrapSandbox(base_dir=str(public_dir)), SandboxSpec()
    for _ in range(ASKS_BEFORE_SPARES):
        sandbox.open(spec).close()
    ready_spare(sandbox._spares, spec)
    uids = session_uids(public_dir)
    gc.disable()  # freed by reference counting, not by a cyclic collection that may come much later
    try:
        del sandbox
        assert nothing_left(public_dir, uids, within=10)
    finally:
        gc.enable()


EXITING = """
import os, signal, sys
from recreate.sandbox import SandboxSpec
from recreate.sandbox.bwrap import BwrapSandbox
sandbox = BwrapSandbox(base_dir=sys.argv[1])
for n in range(3):
    spec = SandboxSpec(env={"N": str(n)})
    for _ in range(4):
        sandbox.open(spec).close()
    sandbox._spares._ready[repr(spec)][0].result(timeout=60)
sandbox.open(SandboxSpec(env={"N": "0"}))  # a spare handed out, its next one still opening
print("ready", flush=True)
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_spares_end_with_their_process(public_dir: Path, how: str) -> None:
    script = textwrap.dedent(EXITING)
    argv = [sys.executable, "-c", script, str(public_dir), how]
    run = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "ready" in run.stdout, run.stderr
    uids = session_uids(public_dir)

    def gone_within(seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while any(uid_processes(uid) for uid in uids) and time.monotonic() < deadline:
            time.sleep(0.05)
        return not any(uid_processes(uid) for uid in uids)

    # a bwrap started in the instant its owner is killed ends too (it checks, after its parent-death
    # signal is set, that its parent is still the owner: ~1 run in 8 left one running before)
    assert gone_within(20), f"processes of the {how}ed owner's sessions outlived it"
    if how == "exit":
        assert run.returncode == 0 and "Traceback" not in run.stderr
    else:  # what a killed owner left on disk goes at the next open in the same place
        BwrapSandbox(base_dir=str(public_dir)).open(SandboxSpec()).close()
    assert not any(public_dir.iterdir())


OBSERVABLE = (  # limits, environment (less the per-command marker), files, processes, ids
    'ulimit -a; env | grep -v _COMMAND= | sort; ls -A . /tmp; ls /proc | grep -c "^[0-9]"; id'
)


def test_a_spare_that_sat_idle_looks_like_a_fresh_open_to_a_command() -> None:
    sandbox, spec = BwrapSandbox(), SandboxSpec(cpu_seconds=2, env={"WHO": "idle"})
    for _ in range(ASKS_BEFORE_SPARES):
        sandbox.open(spec).close()
    spare = ready_spare(sandbox._spares, spec)
    time.sleep(1)  # sat idle: time-based limits (cpu seconds) are per command, none runs down meanwhile
    got, fresh = sandbox.open(spec), sandbox._open_now(spec)
    try:
        assert got is spare
        seen = [s.run(OBSERVABLE, timeout=30) for s in (got, fresh)]
        assert seen[0].stdout == seen[1].stdout and seen[0].ok
        burn = "timeout 1.5 sh -c 'while :; do :; done'; echo $?"  # 1.5 s of CPU fit in the 2 s limit
        assert got.run(burn, timeout=30).stdout == "124\n"
    finally:
        for session in (got, fresh):
            session.close()
        sandbox.close_spares()
