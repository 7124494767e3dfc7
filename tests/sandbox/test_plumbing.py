"""The pieces under the backends: output capping, environment, workspace paths."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recreate.sandbox import SandboxError, get_sandbox, resolve_sandbox
from recreate.sandbox.process import _SETPRIV, CappedOutput, exit_code_of
from recreate.sandbox.shell import sandbox_env, shell_argv
from recreate.sandbox.workspace import read_file, workspace_parts, write_file
from tests.sandbox.conftest import host_processes


def test_capped_output_keeps_head_and_tail_and_counts_all() -> None:
    sink = CappedOutput(10)
    for chunk in (b"abc", b"defgh", b"ijklmnop", b"qrstuvwxyz"):
        sink.feed(chunk)
    assert (bytes(sink.head), bytes(sink.tail), sink.total) == (b"abcde", b"vwxyz", 26)
    assert sink.truncated and sink.text() == "abcde\n[... 16 bytes omitted of 26 ...]\nvwxyz"


def test_capped_output_under_the_limit_is_untouched() -> None:
    sink = CappedOutput(64)
    sink.feed("héllo ".encode())
    sink.feed(b"world")
    assert not sink.truncated and sink.text() == "héllo world"


def test_exit_code_of_signal_deaths() -> None:
    assert (exit_code_of(0), exit_code_of(3), exit_code_of(-9)) == (0, 3, 137)


def test_resolve_sandbox_takes_a_backend_or_its_name() -> None:
    box = get_sandbox("local")
    assert resolve_sandbox(box) is box
    assert type(resolve_sandbox("local")) is type(box)
    with pytest.raises(SandboxError, match="unknown sandbox backend 'nope'"):
        resolve_sandbox("nope")


def test_env_starts_fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEAKY", "1")
    env = sandbox_env("/workspace", {"A": "1"}, None, {"B": "2"})
    assert env["HOME"] == "/workspace" and env["A"] == "1" and env["B"] == "2" and "LEAKY" not in env


@pytest.mark.parametrize(
    "name", ["ANTHROPIC_API_KEY", "github_token", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY"]
)
def test_env_refuses_credential_names(name: str) -> None:
    with pytest.raises(SandboxError, match="credential"):
        sandbox_env("/w", {name: "x"})


def test_env_refuses_invalid_names() -> None:
    with pytest.raises(SandboxError, match="invalid"):
        sandbox_env("/w", {"A=B": "x"})


def test_persistent_argv_passes_command_as_data() -> None:
    argv = shell_argv("echo 'it''s'; rm -rf /nope", "/tmp/state", {"X": "a'b"})
    assert argv[:2] == ["/bin/sh", "-c"] and argv[4:6] == ["/tmp/state", "echo 'it''s'; rm -rf /nope"]
    assert argv[6] == "export X='a'\"'\"'b'\n"
    assert shell_argv("ls") == ["/bin/sh", "-c", "ls"]


@pytest.mark.parametrize(
    ("path", "parts"),
    [("a/b.txt", ["a", "b.txt"]), ("/workspace/a/./b", ["a", "b"]), ("./x", ["x"]), ("a/../b", ["b"])],
)
def test_workspace_parts(path: str, parts: list[str]) -> None:
    assert workspace_parts(path, "/workspace") == parts


@pytest.mark.parametrize(
    "path", ["", "/workspace", "/etc/passwd", "/workspacex/a", "../a", "a/../../b", "a\0b"]
)
def test_workspace_parts_refuses_escapes(path: str) -> None:
    with pytest.raises(SandboxError):
        workspace_parts(path, "/workspace")


def test_write_and_read_refuse_symlinks_anywhere_on_the_path(tmp_path: Path) -> None:
    root, outside = tmp_path / "ws", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("s")
    os.symlink(outside, root / "dir")
    os.symlink(outside / "secret", root / "file")
    for parts in (["dir", "secret"], ["file"]):
        with pytest.raises(SandboxError):
            read_file(root, parts, 1000)
        with pytest.raises(SandboxError):
            write_file(root, parts, b"x")
    assert (outside / "secret").read_text() == "s"
    write_file(root, ["new", "deep", "f"], b"data", 0o755)
    assert read_file(root, ["new", "deep", "f"], 1000) == b"data"
    assert os.stat(root / "new" / "deep" / "f").st_mode & 0o777 == 0o755


def test_read_refuses_oversized_files(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 100)
    with pytest.raises(SandboxError, match="limit"):
        read_file(tmp_path, ["big"], 99)


_STARTER = """
import subprocess, sys, time
from recreate.sandbox.process import as_user
from tests.sandbox.conftest import host_processes
prefix, _ = as_user(None, die_with_us=True)
# the chain waits before setpriv: with a delay, this starter is gone before the death signal is set
delay, marker, stay = sys.argv[1:]
late = ["/bin/sh", "-c", 'sleep "$0"; exec "$@"', delay, *prefix, "sleep", marker]
subprocess.Popen(late, start_new_session=True)
if stay == "stay":
    time.sleep(1.0)
    print("ran" if host_processes("sleep " + marker) else "did not run")
"""


@pytest.mark.skipif(not _SETPRIV, reason="util-linux setpriv is not installed")
@pytest.mark.parametrize("starter_dies", [True, False])
def test_a_child_whose_starter_died_before_its_death_signal_was_set_exits(starter_dies: bool) -> None:
    """The window bwrap keepers had: an owner SIGKILLed between its fork and setpriv's prctl left the
    keeper running forever (ppid 1; no parent-death signal would come). A starter that stays gets its
    child, which dies with it."""
    marker = f"{4000 + os.getpid() % 1000}.25"  # a sleep length that names this test's process
    argv = [sys.executable, "-c", _STARTER, "0.3" if starter_dies else "0", marker]
    started = subprocess.run([*argv, "go" if starter_dies else "stay"], capture_output=True, text=True,
                             timeout=60, cwd=Path(__file__).parents[2])  # fmt: skip
    assert started.returncode == 0 and started.stdout == ("" if starter_dies else "ran\n"), started.stderr
    time.sleep(1.0)
    left = host_processes(f"sleep {marker}")
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], "the child outlived its starter"
