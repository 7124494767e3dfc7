"""Model-written commands attacking the command runner (runner.py) of `local` and `bwrap` sessions:
reach the runner or its descriptors, forge a result (their own or a later command's), leave state that
makes a later result lie, shed the limits, take the session down. Each test passes when the sandbox
holds. Real sessions; each command is quick."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from recreate.sandbox import SandboxError
from tests.sandbox.conftest import OpenSession, _make_opener, wait_until_running
from tests.sandbox.test_hostile import wait_until_gone

# Writes "0\n" (an exit status, a pid) to every descriptor 3..63 it holds, and takes whatever request
# (with its pipes) arrives on any socket among them, answering into those pipes.
FORGE_OWN_DESCRIPTORS = (
    "import os, socket\n"
    "def forge_own():\n"
    "    for fd in range(3, 64):\n"
    "        try:\n"
    "            os.write(fd, b'0\\n')\n"
    "            sock = socket.fromfd(fd, socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "            sock.settimeout(0.01)\n"
    "            for each in socket.recv_fds(sock, 4096, 8)[1]:\n"
    "                os.write(each, b'FORGED\\n0\\n')\n"
    "        except OSError:\n"
    "            pass\n"
    "forge_own()\n"
)
# For 3 s, again and again: the above, and a forged result into every descriptor of every other
# process it can open.
FORGE_OTHERS = (
    "import glob, time\n"
    "end = time.time() + 3\n"
    "while time.time() < end:\n"
    "    forge_own()\n"
    "    for path in glob.glob('/proc/[0-9]*/fd/*'):\n"
    "        if not path.startswith(f'/proc/{os.getpid()}/'):\n"
    "            try:\n"
    "                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)\n"
    "                os.write(fd, b'FORGED\\n0\\n')\n"
    "                os.close(fd)\n"
    "            except OSError:\n"
    "                pass\n"
    "    time.sleep(0.02)\n"
)


@pytest.fixture(params=["local", "bwrap"])
def open_host(request: pytest.FixtureRequest) -> Iterator[OpenSession]:
    yield from _make_opener(request, request.param)


@pytest.fixture
def open_bwrap(request: pytest.FixtureRequest) -> Iterator[OpenSession]:
    yield from _make_opener(request, "bwrap")


def python(script: str) -> str:
    return "python3 -c " + "'" + script.replace("'", "'\\''") + "'"


def test_a_command_holds_no_descriptor_but_its_stdio(open_host) -> None:
    session = open_host()
    for _ in range(2):  # the first command and a later one (the runner has served a request)
        assert session.run("ls /proc/$$/fd", timeout=30).stdout == "0\n1\n2\n"


def test_a_command_cannot_write_its_own_exit_status(open_host) -> None:
    result = open_host().run(python(FORGE_OWN_DESCRIPTORS) + "; echo honest; exit 7", timeout=30)
    assert (result.exit_code, result.stdout, result.timed_out) == (7, "honest\n", False)


def test_a_background_job_cannot_forge_or_steal_a_later_result(open_host) -> None:
    session = open_host()
    if session.backend == "local" and session.uid is None:
        pytest.skip("unprivileged, local runs commands as our own uid: not isolation")
    started = session.run(f"({python(FORGE_OWN_DESCRIPTORS + FORGE_OTHERS)} &) ; echo started", timeout=30)
    assert started.stdout == "started\n"
    for code in (4, 5):
        result = session.run(f"sleep 0.8; echo honest; exit {code}", timeout=30)
        assert (result.exit_code, result.stdout, result.stderr) == (code, "honest\n", "")


def test_late_output_of_a_finished_command_never_reaches_a_later_one(open_host) -> None:
    session = open_host()
    first = session.run("(sleep 0.3; echo LATE; echo LATE >&2) & echo first", timeout=30)
    assert first.stdout == "first\n"
    second = session.run("sleep 0.8; echo second", timeout=30)
    assert (second.stdout, second.stderr) == ("second\n", "")


def test_output_that_mimics_the_protocol_or_is_not_text_is_only_output(open_host) -> None:
    lying = r"printf '0\n!error\nready 1\n\0\377\376\n' ; printf '0\n' >&2; exit 3"
    result = open_host().run(lying, timeout=30)
    assert result.exit_code == 3 and not result.timed_out
    assert result.stdout.startswith("0\n!error\nready 1\n\x00") and result.stderr == "0\n"
    assert result.stdout_bytes == 21


def test_flooding_both_pipes_at_once_is_capped_and_counted(open_host) -> None:
    flood = (
        "head -c 8000000 /dev/zero | tr '\\0' a & head -c 8000000 /dev/zero | tr '\\0' b >&2; wait; exit 5"
    )
    result = open_host(output_limit=4096).run(flood, timeout=60)
    assert (result.exit_code, result.stdout_bytes, result.stderr_bytes) == (5, 8_000_000, 8_000_000)
    assert result.stdout_truncated and len(result.stdout) < 4096 + 200


def test_a_command_that_never_reads_stdin_gets_end_of_file(open_host) -> None:
    result = open_host().run("cat; read line; echo done $?", timeout=10)
    assert (result.stdout, result.timed_out) == ("done 1\n", False)


def test_limits_hold_for_every_command_and_cannot_be_raised(open_host) -> None:
    session = open_host(cpu_seconds=77, max_file_mb=3)
    first = session.run(
        "ulimit -t 1; ulimit -t 1000 2>/dev/null && echo raised; cat /proc/self/limits", timeout=30
    )
    assert "raised" not in first.stdout
    later = session.run("cat /proc/self/limits", timeout=30).stdout  # a command's own lowering is its own
    assert re.search(r"Max cpu time\s+77\s+77\s", later)
    assert re.search(rf"Max file size\s+{3 * 1024 * 1024}\s+{3 * 1024 * 1024}\s", later)
    big = session.run("head -c 4000000 /dev/zero > big; echo $?; wc -c < big", timeout=30).stdout.split()
    assert big[0] != "0" and int(big[1]) <= 3 * 1024 * 1024


def test_commands_run_unprivileged_in_the_session_cgroup(open_bwrap) -> None:
    session = open_bwrap()
    status = session.run("cat /proc/self/status", timeout=30).stdout
    assert re.search(r"Uid:\s+65534\s+65534\s+65534\s+65534", status)
    assert re.search(r"CapEff:\s+0+\n", status)
    session.run("sleep 4831 &", timeout=30)
    (sleeper,) = wait_until_running("sleep 4831")
    runner = session._runner.pid  # type: ignore[attr-defined]
    assert Path(f"/proc/{sleeper}/cgroup").read_text() == Path(f"/proc/{runner}/cgroup").read_text()
    if session.cgroup is not None:  # type: ignore[attr-defined]
        assert Path(f"/proc/{sleeper}/cgroup").read_text() != Path("/proc/self/cgroup").read_text()


def test_the_runner_is_out_of_a_bwrap_commands_sight(open_bwrap) -> None:
    script = (
        "import glob\n"
        "for path in glob.glob('/proc/[0-9]*/cmdline'):\n"
        "    try:\n"
        "        print(open(path, 'rb').read().replace(b'\\0', b' ').decode())\n"
        "    except OSError:\n"
        "        pass\n"
    )
    seen = open_bwrap().run(python(script), timeout=30).stdout
    assert "bwrap" in seen and "runner.py" not in seen and "recreate" not in seen


def test_a_local_command_cannot_read_trace_or_stop_the_runners_insides(open_host) -> None:
    session = open_host()
    if session.backend != "local":
        pytest.skip("bwrap's runner is invisible to its commands (see above)")
    script = (
        "import ctypes, os\n"
        "shell = os.getppid()\n"
        "runner = int(open(f'/proc/{shell}/stat').read().rsplit(')', 1)[1].split()[1])\n"
        "if b'runner.py' in open(f'/proc/{runner}/cmdline', 'rb').read():\n"
        "    print('runner')\n"
        "for path in (f'/proc/{runner}/mem', f'/proc/{runner}/environ'):\n"
        "    try:\n"
        "        open(path, 'rb').read(1); print('read', path)\n"
        "    except OSError:\n"
        "        pass\n"
        "try:\n"
        "    os.listdir(f'/proc/{runner}/fd'); print('listed fds')\n"
        "except OSError:\n"
        "    pass\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.ptrace(16, runner, None, None) == 0:\n"  # PTRACE_ATTACH
        "    print('attached')\n"
        "print('done')\n"
    )
    assert session.run(python(script), timeout=30).stdout == "runner\ndone\n"
    assert session.run("echo usable", timeout=30).stdout == "usable\n"


def test_the_marker_cannot_be_overridden_by_the_caller(open_host) -> None:
    result = open_host().run("echo $RECREATE_COMMAND", env={"RECREATE_COMMAND": "mine"}, timeout=30)
    assert result.stdout.strip() != "mine" and result.stdout.strip()


@pytest.mark.parametrize("attack", ["kill -9 -1", "kill -STOP -1", python("import os\nos.kill(-1, 9)")])
def test_killing_or_stopping_everything_visible_never_hangs_later_commands(open_bwrap, attack: str) -> None:
    session = open_bwrap()
    for command in (f"{attack}; sleep 0.3; echo after", "echo usable", "echo usable"):
        try:
            result = session.run(command, timeout=10)
        except SandboxError as exc:
            assert "sandbox has exited" in str(exc)
            continue
        assert not result.timed_out
        if command == "echo usable":
            assert result.stdout == "usable\n"  # a result is either true or an error, never a lie
    session.close()
    assert wait_until_gone("sleep 0.3", seconds=3) == []


def test_a_command_that_is_not_text_runs_as_its_bytes_or_is_a_clear_error(open_host) -> None:
    session = open_host()
    raw = session.run("printf '%s' \udcff | od -An -tx1", env={"RAW": "\udcfe"}, timeout=30)
    assert raw.stdout.split() == ["ff"]  # surrogate escapes are the bytes they stand for
    assert session.run(
        "printf '%s' \"$RAW\" | od -An -tx1", env={"RAW": "\udcfe"}, timeout=30
    ).stdout.split() == ["fe"]
    with pytest.raises(SandboxError, match="not valid text"):
        session.run("echo \ud800", timeout=30)
    with pytest.raises(SandboxError, match="Argument list too long"):
        session.run("echo " + "a" * 3_000_000, timeout=30)
    assert session.run("echo usable", timeout=30).stdout == "usable\n"


def test_a_persistent_session_gives_each_command_its_own_marker(open_host) -> None:
    session = open_host(persistent=True)
    markers = {session.run("echo $RECREATE_COMMAND", timeout=30).stdout for _ in range(2)}
    assert len(markers) == 2  # the saved state does not bring back an earlier command's marker
    assert session.run("export KEPT=yes", timeout=30).ok
    escape = session.run("setsid sh -c '(sleep 4852 &)' & sleep 30", timeout=1.5)
    assert escape.timed_out and wait_until_gone("sleep 4852", seconds=3) == []
    assert session.run("echo $KEPT", timeout=30).stdout == "yes\n"


def test_a_command_cannot_leave_or_loosen_its_cgroup(open_host) -> None:
    session = open_host()
    names = r"\( -name cgroup.procs -o -name memory.limit_in_bytes -o -name memory.max -o -name pids.max \)"
    attempt = (
        f"for f in $(find /sys/fs/cgroup -maxdepth 6 {names} 2>/dev/null); do"
        " (echo $$ > $f) 2>/dev/null && echo WROTE $f; (echo max > $f) 2>/dev/null && echo WROTE $f;"
        " done; sleep 4861 & echo checked"
    )
    assert session.run(attempt, timeout=30).stdout == "checked\n"
    (sleeper,) = wait_until_running("sleep 4861")
    runner = session._runner.pid  # type: ignore[attr-defined]
    assert Path(f"/proc/{sleeper}/cgroup").read_text() == Path(f"/proc/{runner}/cgroup").read_text()
