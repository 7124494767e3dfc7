"""bwrap specifics: a chosen rootfs, read-only binds, opting into the network, clear start errors."""

from __future__ import annotations

import os
import shutil
import socket
import tarfile
from pathlib import Path

import pytest

from recreate.sandbox import SandboxError, SandboxSpec, get_sandbox

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture
def busybox_rootfs(public_dir: Path) -> Path:
    from recreate.sandbox.images import find_busybox, write_rootfs

    try:
        tarball = write_rootfs(find_busybox(), public_dir / "rootfs.tar")
    except SandboxError as exc:
        pytest.skip(str(exc))
    rootfs = public_dir / "rootfs"
    with tarfile.open(tarball) as tar:
        tar.extractall(rootfs, filter="tar")
    rootfs.chmod(0o755)
    return rootfs


def test_runs_in_a_chosen_rootfs(busybox_rootfs: Path) -> None:
    with get_sandbox("bwrap").open(SandboxSpec(image=str(busybox_rootfs))) as session:
        result = session.run("cat /etc/passwd; ls /; id -u", timeout=30)
    assert result.ok, result.stderr
    assert "nobody:x:65534" in result.stdout and "usr" not in result.stdout.split()
    assert result.stdout.endswith("65534\n")


def test_rootfs_without_a_shell_is_refused(public_dir: Path) -> None:
    with pytest.raises(SandboxError, match="/bin/sh"):
        get_sandbox("bwrap").open(SandboxSpec(image=str(public_dir)))


def test_ro_binds_are_visible_and_read_only(public_dir: Path) -> None:
    shared = public_dir / "pinned-env"
    shared.mkdir()
    (shared / "lib.txt").write_text("pinned")
    spec = SandboxSpec(ro_binds=((str(shared), "/pinned"),))
    with get_sandbox("bwrap").open(spec) as session:
        result = session.run("cat /pinned/lib.txt; echo x > /pinned/new && echo WROTE", timeout=30)
    assert result.stdout == "pinned" and not (shared / "new").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands the sandbox a different uid")
def test_private_ro_bind_is_a_clear_error(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir()
    tmp_path.chmod(0o700)
    with pytest.raises(SandboxError, match="not reachable by the sandbox"):
        get_sandbox("bwrap").open(SandboxSpec(ro_binds=((str(private), "/opt/x"),)))


def test_missing_ro_bind_is_a_clear_error(tmp_path: Path) -> None:
    spec = SandboxSpec(ro_binds=((str(tmp_path / "absent"), "/opt/x"),))
    with pytest.raises(SandboxError, match="does not exist"):
        get_sandbox("bwrap").open(spec)


def test_network_can_be_granted_explicitly() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe = f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 3)'"
        with get_sandbox("bwrap").open(SandboxSpec(network=True)) as session:
            assert session.run(probe, timeout=30).ok
        with get_sandbox("bwrap").open(SandboxSpec()) as session:
            assert not session.run(probe, timeout=30).ok


def test_a_killed_sandbox_says_so() -> None:
    with get_sandbox("bwrap").open(SandboxSpec()) as session:
        session._keeper.kill()
        session._keeper.wait()
        with pytest.raises(SandboxError, match=r"exited \(its process was killed: signal 9\)"):
            session.run("true", timeout=30)  # which signal: who could have sent it
        with pytest.raises(SandboxError, match="exited"):
            session.put("file.txt", "its workspace went with it")


def test_sessions_open_when_the_process_holds_over_1024_descriptors():
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"hard RLIMIT_NOFILE is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with get_sandbox("bwrap").open(SandboxSpec()) as session:
            assert session.run("echo high-fd", timeout=20).stdout.strip() == "high-fd"
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_session_outlives_the_thread_that_opened_it():
    import threading

    opened = {}
    opener = threading.Thread(target=lambda: opened.update(session=get_sandbox("bwrap").open(SandboxSpec())))
    opener.start()
    opener.join()  # bwrap's --die-with-parent watches a thread; ours must not be that thread
    with opened["session"] as session:
        assert session.run("echo alive", timeout=20).stdout.strip() == "alive"
