"""The persistent session's shell script on each shell a sandbox may have as /bin/sh (dash, bash,
busybox ash), run directly: what one command leaves (aliases, functions, a deleted directory, a shorter
state) never breaks the next one's state."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from recreate.sandbox.shell import shell_argv

SHELLS = {"dash": ["dash"], "bash": ["bash", "--posix"], "busybox": ["busybox", "sh"]}  # bash as sh: posix


@pytest.fixture(params=sorted(SHELLS))
def run(request: pytest.FixtureRequest, tmp_path: Path):
    shell = SHELLS[request.param]
    if shutil.which(shell[0]) is None:
        pytest.skip(f"{shell[0]} is not installed")
    home = tmp_path / "home"
    home.mkdir()

    def run_command(cmd: str) -> subprocess.CompletedProcess[str]:
        argv = [*shell, *shell_argv(cmd, str(tmp_path / "state"), {})[1:]]  # the shell, not /bin/sh
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "RECREATE_COMMAND": "x"}
        return subprocess.run(argv, cwd=home, env=env, text=True, capture_output=True, timeout=30)

    return run_command


def test_aliases_and_functions_of_the_saves_builtins_do_not_break_the_next_command(run) -> None:
    assert run(f"export PAD='{'x' * 300}'\"'\"'{'y' * 300}' && mkdir -p sub && cd sub").returncode == 0
    assert run("unset PAD; alias echo='echo -e' pwd=: export=: unset=:; echo() { :; }").returncode == 0
    after = run('echo "still ${PAD-unset}"; pwd')
    assert (after.returncode, after.stderr) == (0, "")
    assert after.stdout.split("\n")[0] == "still unset" and after.stdout.rstrip().endswith("/home/sub")


def test_a_directory_deleted_under_the_shell_does_not_bring_back_an_older_one(run) -> None:
    assert run("mkdir -p a && cd a").returncode == 0
    assert run("mkdir -p ../b && cd ../b && rmdir ../b").returncode == 0
    assert not run("pwd").stdout.rstrip().endswith("/a")


def test_a_directory_name_with_blanks_at_its_ends_comes_back_whole(run) -> None:
    assert run("mkdir ' d ' && cd ' d '").returncode == 0
    assert run("pwd").stdout == f"{run('cd .. && pwd').stdout.rstrip()}/ d \n"


def test_a_state_cut_short_by_a_kill_is_said_and_skipped_not_fatal(run, tmp_path: Path) -> None:
    assert run("export KEEP=1 LONG='a b' && mkdir -p sub && cd sub").returncode == 0
    saved = (tmp_path / "state.env").read_bytes()
    (tmp_path / "state.env").write_bytes(saved[: saved.index(b"a b") + 1])  # the save killed mid-quote
    cut = run('echo "ran ${LONG-unset}"; pwd')
    assert cut.returncode == 0 and cut.stdout.split("\n")[0] == "ran unset"
    assert cut.stdout.rstrip().endswith("/sub")  # the directory is kept apart and survives
    assert "the saved variables could not be read" in cut.stderr
    again = run("export NEW=2 && echo $NEW")
    assert (again.returncode, again.stdout, again.stderr) == (0, "2\n", "")
    assert run('echo "$NEW"').stdout == "2\n"
