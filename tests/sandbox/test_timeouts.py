"""A timed-out command leaves nothing of itself running, whatever it did to get away: ignore SIGTERM,
setsid, double-fork, clear its environment, fork as fast as it can. Background work of earlier
commands survives it. Checked on the host's /proc while the session stays open (every backend; the
runner's own cases on local and bwrap)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from recreate.sandbox import SandboxError
from tests.sandbox.conftest import OpenSession, _make_opener
from tests.sandbox.test_hostile import _exactly, wait_until_gone

ESCAPES = {
    "ignores SIGTERM": "sh -c 'trap \"\" TERM HUP INT; sleep 4801' & sleep 30",
    "setsid and double fork": "setsid sh -c '(sleep 4802 &); sleep 4802' & sleep 30",
    "clears its environment": "setsid sh -c '(env -i /bin/sleep 4803 &)' & sleep 30",
    "python daemon": (
        "python3 -c 'import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        '        os.execve("/bin/sleep", ["sleep", "4804"], {})\n\' & sleep 30'
    ),
}


@pytest.fixture(params=["local", "bwrap"])
def open_host(request: pytest.FixtureRequest) -> Iterator[OpenSession]:
    yield from _make_opener(request, request.param)


@pytest.mark.parametrize("escape", list(ESCAPES))
def test_what_a_timed_out_command_started_dies_with_it(open_session, escape: str) -> None:
    session = open_session()
    if session.backend == "docker" and "python" in escape:
        pytest.skip("the busybox test image has no python3")
    result = session.run(ESCAPES[escape], timeout=1.5)
    assert result.timed_out and result.exit_code is None
    assert wait_until_gone("sleep 480", seconds=3) == []
    assert session.run("echo usable", timeout=30).stdout == "usable\n"


def test_background_work_of_earlier_commands_survives_a_timeout(open_session) -> None:
    session = open_session()
    assert session.run("setsid sh -c 'sleep 4811 & sleep 4812' >/dev/null 2>&1 &", timeout=30).ok
    assert session.run("setsid sh -c 'env -i /bin/sleep 4813 &' & sleep 30", timeout=1.5).timed_out
    assert wait_until_gone("sleep 4813", seconds=3) == []
    assert len(_exactly("sleep 4811")) == 1 and len(_exactly("sleep 4812")) == 1
    session.close()
    assert wait_until_gone("sleep 481") == []


def test_a_forking_flood_of_escapees_is_all_killed(open_host) -> None:
    session = open_host(max_processes=64)
    result = session.run("while :; do (setsid sleep 4821 &); done", timeout=1.5)
    assert result.timed_out
    assert wait_until_gone("sleep 4821", seconds=3) == []
    assert session.run("echo usable", timeout=30).stdout == "usable\n"


def test_an_escaped_output_flood_is_killed_and_the_output_capped(open_session) -> None:
    session = open_session(output_limit=2048)
    result = session.run("(setsid yes flood &); sleep 30", timeout=1.5)
    assert result.timed_out and len(result.stdout.encode()) < 2048 + 200
    assert wait_until_gone("yes flood", seconds=3) == []


def test_a_command_that_stops_its_runner_times_out_and_the_session_recovers(open_host) -> None:
    session = open_host()
    if session.backend == "bwrap":
        # the runner lives outside the sandbox's pid namespace: a command cannot even name it
        assert session.run("echo $PPID", timeout=30).stdout == "0\n"
    else:
        assert session.run("kill -STOP $PPID", timeout=1).timed_out
    assert session.run("echo usable", timeout=30).stdout == "usable\n"


def test_a_command_that_kills_its_runner_gets_an_unknown_status_and_a_new_runner(open_host) -> None:
    session = open_host()
    if session.backend == "bwrap":
        pytest.skip("bwrap's runner is out of the commands' reach (see the test above)")
    result = session.run("kill -9 $PPID; sleep 0.5", timeout=30)
    assert result.exit_code is None and "runner was killed" in result.stderr
    assert session.run("echo usable", timeout=30).stdout == "usable\n"


def test_a_command_that_kills_its_runner_at_once_runs_once(open_host, monkeypatch) -> None:
    """The runner may run the command and die before the sender returns: that is the command's doing,
    not a runner that was gone before, so it is not run again on a new runner."""
    import socket

    session = open_host()
    if session.backend == "bwrap":
        pytest.skip("bwrap's runner is out of the commands' reach")
    send_fds = socket.send_fds

    def send_then_wait(*args, **kwargs):  # the runner gets the whole command and runs it meanwhile
        sent = send_fds(*args, **kwargs)
        time.sleep(0.5)
        return sent

    monkeypatch.setattr(socket, "send_fds", send_then_wait)
    result = session.run("echo ran >> runs.txt; kill -9 $PPID; sleep 2", timeout=30)
    monkeypatch.undo()
    assert result.exit_code is None and "runner was killed" in result.stderr
    assert session.get("runs.txt") == b"ran\n"
    assert session.run("echo usable", timeout=30).stdout == "usable\n"


def test_a_nul_byte_in_a_command_is_a_clear_error(open_host) -> None:
    with pytest.raises(SandboxError, match="NUL byte"):
        open_host().run("echo a\0b", timeout=30)
