"""Hostile input on every backend that is available: each is contained, gives a clear Result, and
leaves nothing running. `local` is not isolation, so it is only held to what it promises."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from recreate.sandbox import SandboxError, get_sandbox
from recreate.sandbox.cgroups import memory_limit_support
from recreate.sandbox.host import HostSession, uid_processes
from tests.sandbox.conftest import host_processes, wait_until_running

MB = 1024 * 1024


def leftovers(session) -> list:
    """What of the session still exists after close(): processes of its uid, or its container."""
    if isinstance(session, HostSession):
        return uid_processes(session.uid) if session.uid is not None else []
    return session.api.containers(all=True, filters={"id": session.id})


def wait_until_gone(needle: str, seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (found := host_processes(needle)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def backend_of(session) -> str:
    return session.backend


@pytest.mark.slow
def test_fork_bomb_is_contained(open_session) -> None:
    session = open_session(max_processes=48)
    if session.backend == "local" and session.uid is None:
        pytest.skip("unprivileged, local's process limit counts all of this user's processes")
    result = session.run("bomb() { bomb | bomb; }; bomb", timeout=4)
    assert not result.ok
    session.close()
    assert leftovers(session) == []
    with open_session() as fresh:
        assert fresh.run("echo responsive", timeout=30).stdout == "responsive\n"


def test_memory_bomb_fails_without_hurting_the_session(open_session) -> None:
    session = open_session(memory_mb=128)
    result = session.run("awk 'BEGIN { s = \"x\"; while (1) s = s s }'", timeout=60)
    assert not result.ok and not result.timed_out
    assert session.run("echo alive", timeout=30).stdout == "alive\n"


def test_disk_fill_stops_at_the_file_size_limit(open_session) -> None:
    session = open_session(max_file_mb=4)
    for target in ("big", '"$TMPDIR/big"'):
        result = session.run(f"dd if=/dev/zero of={target} bs=1M count=64", timeout=60)
        assert not result.ok
        size = session.run(f"wc -c < {target}", timeout=30).stdout.strip()
        assert int(size) <= 4 * MB


def _exactly(command: str) -> list[int]:
    """Host pids running exactly `command` (not the shells whose scripts mention it)."""
    found = []
    for pid in host_processes(command):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip() == command:
                found.append(pid)
    return found


def _resident_mb(command: str) -> float:
    """Resident memory of the host processes running exactly `command`, together."""
    total = 0
    for pid in _exactly(command):
        with contextlib.suppress(OSError, IndexError):
            total += int(Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()[0])
    return total / 1024


def test_memory_limit_holds_for_the_whole_session(open_isolated) -> None:
    session = open_isolated(memory_mb=200)
    if isinstance(session, HostSession) and session.cgroup is None:
        pytest.skip(f"no session cgroup here: {memory_limit_support().detail}")
    # five processes of 60 MB each, every one under the per-process limit, 300 MB together
    hold = f"sleep {4000 + os.getpid() % 5000}"  # this test's own (other test runs may share the machine)
    holders = f"for i in 1 2 3 4 5; do (dd if=/dev/zero bs=60M count=1 2>/dev/null | {hold}) & done"
    session.run(f"{holders}; sleep 3", timeout=60)
    assert len(_exactly(hold)) == 5  # the holders were all started
    assert _resident_mb("dd if=/dev/zero bs=60M count=1") <= 200
    assert session.run("echo alive", timeout=30).stdout == "alive\n"


def test_disk_limit_holds_for_the_whole_workspace(open_isolated) -> None:
    session = open_isolated(disk_mb=20, max_file_mb=20)
    result = session.run(
        "for i in 1 2 3 4 5; do dd if=/dev/zero of=f$i bs=1M count=15 2>/dev/null; done", timeout=60
    )
    assert not result.ok
    sizes = session.run("cat f1 f2 f3 f4 f5 | wc -c", timeout=30).stdout
    assert int(sizes) <= 20 * MB
    session.run("rm f*", timeout=30)
    session.put("after.txt", "room again")
    assert session.get("after.txt") == b"room again"


def test_endless_output_is_capped_and_timed_out(open_session) -> None:
    session = open_session(output_limit=4096)
    result = session.run("yes", timeout=2)
    assert result.timed_out and result.exit_code is None and not result.ok
    assert result.stdout_truncated and result.stdout_bytes > 100 * 4096
    assert len(result.stdout.encode()) < 4096 + 200  # head + tail + the omission marker


def test_long_output_keeps_head_and_tail_and_counts_everything(open_session) -> None:
    session = open_session(output_limit=1000)
    result = session.run("seq 1 20000; echo done >&2", timeout=60)
    expected = "".join(f"{i}\n" for i in range(1, 20001))
    assert result.ok and result.stdout_truncated and not result.stderr_truncated
    assert result.stdout_bytes == len(expected)
    assert result.stdout.startswith("1\n2\n3\n") and result.stdout.endswith("19999\n20000\n")
    assert f"bytes omitted of {len(expected)}" in result.stdout
    assert result.stderr == "done\n"


def test_infinite_loop_times_out_and_its_whole_tree_dies(open_session) -> None:
    session = open_session()
    result = session.run("sleep 4711 & sleep 4712 & while :; do :; done", timeout=1)
    assert result.timed_out and result.exit_code is None
    assert wait_until_gone("sleep 471") == []
    assert session.run("echo usable", timeout=30).stdout == "usable\n"


def test_background_process_does_not_hold_run_and_dies_on_close(open_session) -> None:
    session = open_session()
    result = session.run("sleep 4721 & echo started", timeout=30)
    assert result.ok and result.stdout == "started\n"
    assert wait_until_running("sleep 4721")
    session.close()
    assert wait_until_gone("sleep 4721") == []
    assert leftovers(session) == []


def _host_address() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent; this picks the outgoing interface
        address = probe.getsockname()[0]
    if address.startswith("127."):
        pytest.skip("this host has no non-loopback address to aim at")
    return address


def test_network_egress_fails(open_isolated) -> None:
    address = _host_address()
    accepted: list[object] = []
    with socket.socket() as server:
        server.bind(("0.0.0.0", 0))
        server.listen()
        server.settimeout(0.2)
        port = server.getsockname()[1]
        stop = threading.Event()

        def accept() -> None:
            while not stop.is_set():
                try:
                    accepted.append(server.accept()[0])
                except OSError:
                    continue

        listener = threading.Thread(target=accept)
        listener.start()
        try:
            probe = (
                f"if command -v nc >/dev/null; then nc -w 3 {address} {port} </dev/null; "
                f"else python3 -c 'import socket; socket.create_connection((\"{address}\", {port}), 3)'; fi"
            )
            result = open_isolated().run(probe, timeout=30)
            with socket.create_connection((address, port), 3):  # the server is reachable from the host
                pass
        finally:
            stop.set()
            listener.join()
    assert not result.ok
    assert len(accepted) == 1  # only the host's own connection arrived


def test_host_secrets_are_out_of_reach(open_session, secret_env: str, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the host-secret checks need root to plant a root-only file")
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text("TOP-SECRET-VALUE")
    secret_file.chmod(0o600)
    session = open_session()
    result = session.run(
        f"cat {secret_file}; ls -a /root; cat /root/.bashrc /etc/shadow; env; "
        "cat /proc/1/environ /proc/*/environ",
        timeout=30,
    )
    output = result.stdout + result.stderr
    assert "TOP-SECRET-VALUE" not in output and secret_env not in output
    assert "OPENAI_API_KEY" not in output and "root:" not in result.stdout


def test_writes_outside_the_workspace_fail(open_isolated, tmp_path: Path) -> None:
    open_dir = tmp_path / "world-writable"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    session = open_isolated()
    result = session.run(
        f"for f in /usr/pwned /etc/pwned /pwned {open_dir}/pwned; do echo x > $f && echo WROTE $f; done",
        timeout=30,
    )
    assert "WROTE" not in result.stdout
    assert not (open_dir / "pwned").exists() and not Path("/etc/pwned").exists()
    assert not Path("/usr/pwned").exists()


def test_symlinks_cannot_carry_put_or_get_outside(open_session, tmp_path: Path) -> None:
    secret_file = tmp_path / "host-secret.txt"
    secret_file.write_text("HOST-ONLY")
    target_dir = tmp_path / "target"
    target_dir.mkdir()
    target_dir.chmod(0o777)
    session = open_session()
    session.run(
        f"ln -s /etc/passwd link; ln -s /etc dirlink; ln -s {secret_file} seclink; "
        f"ln -s {target_dir} outdir; mkfifo fifo",
        timeout=30,
    )
    for path in ("link", "dirlink/passwd", "seclink", "fifo"):
        with pytest.raises(SandboxError):
            session.get(path)
    for path in ("link", "dirlink/pwned", "outdir/pwned", "seclink"):
        with pytest.raises(SandboxError):
            session.put(path, "pwned")
    assert secret_file.read_text() == "HOST-ONLY" and list(target_dir.iterdir()) == []
    assert "pwned" not in Path("/etc/passwd").read_text()


_KILLED_PARENT = """
import os, signal, sys
from recreate.sandbox import get_sandbox, SandboxSpec
backend, option = sys.argv[1], sys.argv[2]
options = {"image": option} if backend == "docker" else {"base_dir": option}
session = get_sandbox(backend, **options).open(SandboxSpec())
session.run("sleep 4731 &", timeout=30)
print("ready", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_killing_the_parent_takes_the_sandbox_down(
    open_isolated, request: pytest.FixtureRequest, public_dir: Path
) -> None:
    backend = open_isolated().backend
    option = request.getfixturevalue("busybox_image") if backend == "docker" else str(public_dir)
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_PARENT, backend, option], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == -9 and child.stdout == "ready\n", child.stderr
    assert wait_until_gone("sleep 4731", seconds=20) == []
    if backend == "docker":
        from recreate.sandbox.docker import LABEL, reap_orphans

        sandbox = get_sandbox("docker", image=option)
        reap_orphans(sandbox.client())
        remaining = sandbox.client().api.containers(all=True, filters={"label": LABEL})
        assert [c for c in remaining if c["Image"] == option and "sleep 4731" in str(c)] == []
    else:
        assert len(list(public_dir.glob("recreate-bwrap-*"))) == 1  # the dead session's directory
        get_sandbox("bwrap", base_dir=str(public_dir)).open().close()  # the next open clears it
        assert list(public_dir.glob("recreate-bwrap-*")) == []


_KILLED_AMID_ITS_SESSIONS = """
import os, signal, subprocess, sys, time
from recreate.sandbox import get_sandbox, SandboxSpec
session = get_sandbox(sys.argv[1], base_dir=sys.argv[2]).open(SandboxSpec())
session.run("setsid sleep 4741 & sleep 4742 &", timeout=30)  # (local: no namespace ends them)
if sys.argv[3] == "stopping":  # processes that stop every process of their uid, their killer's included
    session.run(f"(sleep 0.5; exec setsid sh -c '{STOPPER}') >/dev/null 2>&1 &", timeout=30)
    time.sleep(1.5)
if sys.argv[3] == "zygote-killed":  # by someone else, say: a new one must take over its watch at once
    from recreate.sandbox import zygote
    killed = zygote._zygote
    time.sleep(max(0.0, zygote.RESTART_AFTER_SECONDS - (time.monotonic() - killed.started)))
    os.kill(killed.process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while zygote._zygote in (killed, None) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the new one boots and reads its queued "watch"
# a process of the session's uid that nothing of ours started or knows: as bwrap's child is while it
# waits for its parent's go-ahead, which never comes if we are killed in that instant
uid = str(session.uid)
stray = subprocess.Popen(["setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", "sleep", "4743"],
                         start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
deadline = time.monotonic() + 30  # until setpriv has taken the uid: before, it is root's, not the session's
while os.stat(f"/proc/{stray.pid}").st_uid != session.uid and time.monotonic() < deadline:
    time.sleep(0.01)
print("ready", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
STOPPER = "for i in 1 2; do (while :; do kill -STOP -1; done; : stopper-4744) & done; wait"


@pytest.mark.parametrize("how", ["quiet", "stopping", "zygote-killed"])
@pytest.mark.parametrize("backend", ["local", "bwrap"])
def test_every_process_of_a_killed_owners_sessions_ends(backend: str, how: str, public_dir: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("sessions have their own uids only when we are root")
    script = f"STOPPER = {STOPPER!r}\n" + _KILLED_AMID_ITS_SESSIONS
    argv = [sys.executable, "-W", "ignore", "-c", script, backend, str(public_dir), how]
    child = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert child.returncode == -9 and child.stdout == "ready\n", child.stderr
    assert wait_until_gone("sleep 474", seconds=10) == wait_until_gone("stopper-4744", seconds=1) == []


def test_a_session_that_stops_its_killer_still_closes(public_dir: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("sessions have their own uids only when we are root")
    session = get_sandbox("local", base_dir=str(public_dir)).open()
    session.run(f"(sleep 0.5; exec setsid sh -c '{STOPPER}') >/dev/null 2>&1 &", timeout=30)
    time.sleep(1.5)  # everything of the uid is stopped but the two stoppers, one at a time
    closing = threading.Thread(target=session.close, daemon=True)
    closing.start()
    closing.join(timeout=30)  # the killer the close forks cannot be stopped by them
    assert not closing.is_alive() and uid_processes(session.uid) == []


def test_a_session_closed_inside_the_zygote_lock_does_not_wait_for_it(public_dir: Path) -> None:
    from recreate.sandbox import zygote

    session = get_sandbox("local", base_dir=str(public_dir)).open()
    closed = threading.Event()

    def close_inside() -> None:  # as the garbage collector may: on the thread that holds the lock
        with zygote._zygote_lock:
            session.close()
        closed.set()

    threading.Thread(target=close_inside, daemon=True).start()
    assert closed.wait(timeout=30)
    get_sandbox("local", base_dir=str(public_dir)).open().close()  # the zygote hears of it with this


_KILLED_WITH_A_FORKED_WORKER = """
import os, signal, sys, time
from recreate.sandbox import get_sandbox, SandboxSpec
sandbox = get_sandbox("bwrap", base_dir=sys.argv[1])
sessions = [sandbox.open(SandboxSpec()) for _ in range(2)]
sessions[0].run("sleep 4771 &", timeout=30)
worker = os.fork()
if worker == 0:  # like a forked worker pool: it inherits our pipes to the sandboxes, and outlives us
    time.sleep(120)
    os._exit(0)
print(worker, *(session.uid for session in sessions), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_owner_leaves_nothing_running_even_when_its_pipes_live_on(public_dir: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("sessions have their own uids only when we are root")
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WITH_A_FORKED_WORKER, str(public_dir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    worker, *uids = (int(word) for word in child.stdout.readline().split())
    try:
        assert child.wait(timeout=60) == -9
        time.sleep(1)
        assert [pid for uid in uids for pid in uid_processes(uid)] == []
        get_sandbox("bwrap", base_dir=str(public_dir)).open().close()  # the next open sweeps
        assert [pid for uid in uids for pid in uid_processes(uid)] == []
        assert list(public_dir.glob("recreate-bwrap-*")) == []
        cgroups = memory_limit_support().parent
        assert cgroups is None or list(cgroups.glob(f"recreate-{child.pid}-*")) == []
    finally:
        os.kill(worker, signal.SIGKILL)


def test_a_zygote_whose_host_is_gone_already_ends_what_it_was_told_to_watch(public_dir: Path) -> None:
    """Started for a host that is not (any more) its parent, as when the host dies while the zygote
    boots: it still kills the processes of the uids queued to watch, and exits without a traceback."""
    if os.geteuid() != 0:
        pytest.skip("sessions have their own uids only when we are root")
    import recreate.sandbox.runner as runner
    from recreate.sandbox.process import KILLER_UID
    from recreate.sandbox.zygote import send_message

    session = get_sandbox("local", base_dir=str(public_dir)).open()
    try:
        session.run("setsid sleep 4751 >/dev/null 2>&1 &", timeout=30)
        assert wait_until_running("sleep 4751")
        ours, theirs = socket.socketpair()
        with ours, theirs:
            send_message(ours, ["watch", str(session.uid)], [])
            done = subprocess.run(
                [sys.executable, "-I", "-S", runner.__file__, str(theirs.fileno()), "1", str(KILLER_UID)],
                pass_fds=(theirs.fileno(),), capture_output=True, text=True, timeout=30,
            )  # fmt: skip
        assert (done.returncode, done.stderr) == (0, "")
        assert wait_until_gone("sleep 4751", seconds=10) == []
    finally:
        session.close()


def test_a_zygote_that_cannot_start_is_not_restarted_in_a_loop(
    public_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One that dies at once would again: the next session message tries, and says why."""
    from recreate.sandbox import zygote

    session = get_sandbox("local", base_dir=str(public_dir)).open()
    try:
        starts = []
        real = zygote.Zygote
        monkeypatch.setattr(zygote, "Zygote", lambda: starts.append(1) or real())
        with zygote._zygote_lock:
            zygote._zygote.kill()  # (its watcher lets it go: it is no longer the one)
            dying = zygote._zygote = zygote._start()
        dying.kill()
        time.sleep(1.0)
        assert len(starts) == 1 and zygote._zygote is None
        other = get_sandbox("local", base_dir=str(public_dir)).open()  # the next message restarts it
        assert other.run("echo started", timeout=30).stdout == "started\n"
        other.close()
        assert len(starts) == 2 and zygote._zygote not in (dying, None)
    finally:
        session.close()


_FORGOTTEN_DURING_A_RESTART = """
import os, signal, subprocess, sys, time
from recreate.sandbox import get_sandbox, zygote
session = get_sandbox("local", base_dir=sys.argv[1]).open()
uid = str(session.uid)
real_start = zygote._start

def start_then_close():  # the session closes after the new zygote was told to watch its uid
    started = real_start()
    zygote._start = real_start
    session.close()
    return started

zygote._start = start_then_close
killed = zygote._zygote
time.sleep(max(0.0, zygote.RESTART_AFTER_SECONDS - (time.monotonic() - killed.started)))
killed.kill()
deadline = time.monotonic() + 20
while zygote._zygote in (killed, None) and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(0.5)  # the new one reads its messages
# the uid's next owner (uids are reused): its process must outlive us
subprocess.Popen(["setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", "sleep", "4746"],
                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(0.3)
print("ready", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_session_closed_while_the_zygote_restarts_is_forgotten_by_the_new_one(public_dir: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("sessions have their own uids only when we are root")
    argv = [sys.executable, "-W", "ignore", "-c", _FORGOTTEN_DURING_A_RESTART, str(public_dir)]
    child = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert child.returncode == -9 and child.stdout == "ready\n", child.stderr
    try:
        time.sleep(1.0)
        assert host_processes("sleep 4746")  # not killed as the forgotten session's
    finally:
        for pid in host_processes("sleep 4746"):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_a_zygote_whose_watcher_cannot_start_ends_no_session(
    public_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a thread limit the new zygote is dropped: killed, not left to read the end of its socket and
    end every watched session while we live on."""
    from recreate.sandbox import zygote

    session = get_sandbox("local", base_dir=str(public_dir)).open()
    try:
        session.run("setsid sleep 4747 >/dev/null 2>&1 &", timeout=30)
        assert wait_until_running("sleep 4747")
        start = threading.Thread.start

        def no_watcher(thread: threading.Thread) -> None:
            if thread.name == "recreate-zygote":
                raise RuntimeError("can't start new thread")
            start(thread)

        monkeypatch.setattr(threading.Thread, "start", no_watcher)
        killed = zygote._zygote
        time.sleep(max(0.0, zygote.RESTART_AFTER_SECONDS - (time.monotonic() - killed.started)))
        killed.kill()
        time.sleep(1.5)
        assert host_processes("sleep 4747") and zygote._zygote is None
        monkeypatch.undo()
        assert session.run("echo on", timeout=30).stdout == "on\n"
    finally:
        session.close()
