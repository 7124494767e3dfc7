"""The Session contract, the same on every backend."""

from __future__ import annotations

import atexit
import io
import os
import signal
from pathlib import Path

import pytest

from recreate.sandbox import SandboxError, close_soon, open_soon
from recreate.sandbox.base import Session


def test_run_keeps_streams_apart_and_reports_exit_code(open_session) -> None:
    session = open_session()
    result = session.run("echo out; echo err >&2; exit 7", timeout=30)
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 7)
    assert not result.ok and not result.timed_out and result.duration_s > 0
    assert (result.stdout_bytes, result.stderr_bytes) == (4, 4)
    assert isinstance(session, Session)


def test_signal_death_reads_as_128_plus_signal(open_session) -> None:
    result = open_session().run("kill -9 $$", timeout=30)
    assert result.exit_code == 137


def test_put_get_round_trip_in_nested_dirs(open_session, tmp_path: Path) -> None:
    session = open_session()
    script = tmp_path / "tool.sh"
    script.write_text("echo from tool\n")
    script.chmod(0o755)
    session.put("a/b/data.bin", bytes(range(256)))
    session.put("note.txt", "héllo")
    session.put("stream.txt", io.BytesIO(b"streamed"))
    session.put("bin/tool.sh", script)
    assert session.get("a/b/data.bin") == bytes(range(256))
    assert session.get("note.txt") == "héllo".encode()
    assert session.run("cat stream.txt; ./bin/tool.sh", timeout=30).stdout == "streamedfrom tool\n"
    session.run("echo made inside > made.txt", timeout=30)
    assert session.get("made.txt") == b"made inside\n"


def test_absolute_workspace_paths_work_and_others_are_refused(open_session) -> None:
    session = open_session()
    workdir = getattr(session, "workdir", "/workspace")
    session.put(f"{workdir}/abs.txt", "x")
    assert session.get("abs.txt") == b"x"
    for bad in ("/etc/passwd", "../outside", "a/../../outside", ""):
        with pytest.raises(SandboxError):
            session.put(bad, "x")
    with pytest.raises(SandboxError):
        session.get("missing.txt")


def test_not_persistent_by_default(open_session) -> None:
    session = open_session()
    session.run("mkdir -p sub && cd sub && export MARK=1", timeout=30)
    result = session.run('pwd; echo "mark=$MARK"', timeout=30)
    assert not result.stdout.rstrip().split("\n")[0].endswith("/sub")
    assert "mark=\n" in result.stdout


def test_persistent_shell_keeps_cwd_and_exports(open_session) -> None:
    session = open_session(persistent=True)
    session.run("mkdir -p sub && cd sub && export MARK='a b' && exit 3", timeout=30)
    result = session.run('pwd; echo "mark=$MARK"', timeout=30)
    assert result.stdout.split("\n")[0].endswith("/sub")
    assert "mark=a b\n" in result.stdout
    assert session.run("echo $EXTRA", timeout=30, env={"EXTRA": "per-call"}).stdout == "per-call\n"


def test_persistent_state_that_shrinks_leaves_nothing_of_the_longer_one(open_session) -> None:
    """The state is overwritten in place: what a longer earlier state leaves behind is never read."""
    session = open_session(persistent=True)
    deep = "d" * 120
    session.run(
        f"mkdir -p {deep}/e && cd {deep}/e && export LONG={'x' * 3000} KEEP=1 "
        "TRICK=\"$(printf 'a\\nreturn 0\\nexport LATE=1')\"",
        timeout=30,
    )
    shadowed = "echo() { printf X; } && pwd() { printf /; }"  # the command's own functions
    assert session.run(f"cd .. && unset LONG && {shadowed}", timeout=30).ok
    shown = 'pwd; echo "long=${LONG-unset} keep=$KEEP late=${LATE-unset}"; echo "$TRICK"'
    result = session.run(shown, timeout=30)
    lines = result.stdout.split("\n")
    assert lines[0].endswith(f"/{deep}") and lines[1] == "long=unset keep=1 late=unset"
    assert lines[2:5] == ["a", "return 0", "export LATE=1"]
    assert session.run("cd / && unset TRICK && export SHORT=1", timeout=30).ok
    assert session.run('pwd; echo "${TRICK-unset} $SHORT $KEEP"', timeout=30).stdout == "/\nunset 1 1\n"


def test_a_full_tmp_costs_a_persistent_session_its_variables_not_its_later_commands(open_isolated) -> None:
    """The state lives in the session's /tmp; a command that fills it and grows the state gets told the
    variables were not saved, and every later command still runs (a half-written state would not parse)."""
    session = open_isolated(persistent=True, max_file_mb=4)
    assert session.run("export KEEP=1 && cd /", timeout=30).ok
    fill = "head -c 5000000 /dev/zero >/tmp/fill 2>/dev/null"
    full = session.run(f"{fill}; export BIG=$(head -c 20000 /dev/zero | tr '\\0' x)", timeout=30)
    assert "the variables could not be saved (is /tmp full?)" in full.stderr
    after = session.run('rm /tmp/fill && pwd && echo "${KEEP-unset} ${BIG-unset}"', timeout=30)
    assert (after.exit_code, after.stdout) == (0, "/\nunset unset\n")
    assert session.run("export AGAIN=3", timeout=30).ok
    assert session.run("echo $AGAIN", timeout=30).stdout == "3\n"


def test_environment_is_a_fresh_allow_list(open_session, secret_env: str, monkeypatch) -> None:
    monkeypatch.setenv("SOME_HOST_SETTING", "host-only")
    session = open_session(env={"SPEC_VAR": "from-spec"})
    env = session.run("env", timeout=30, env={"RUN_VAR": "from-run"}).stdout
    assert "SPEC_VAR=from-spec" in env and "RUN_VAR=from-run" in env
    assert "SOME_HOST_SETTING" not in env and secret_env not in env and "OPENAI_API_KEY" not in env


def test_credentials_are_refused_as_env(open_session, secret_env: str) -> None:
    session = open_session()
    with pytest.raises(SandboxError, match="credential"):
        session.run("true", timeout=30, env={"OPENAI_API_KEY": "sk-anything"})
    with pytest.raises(SandboxError, match="OPENAI_API_KEY"):
        session.run("true", timeout=30, env={"HARMLESS_NAME": f"prefix-{secret_env}"})


def test_closed_session_refuses_work_and_close_is_idempotent(open_session) -> None:
    session = open_session()
    session.close()
    session.close()
    with pytest.raises(SandboxError, match="closed"):
        session.run("true", timeout=30)
    with pytest.raises(SandboxError, match="closed"):
        session.get("x")


def test_context_manager_closes(open_session) -> None:
    with open_session() as session:
        assert session.run("echo in", timeout=30).stdout == "in\n"
    with pytest.raises(SandboxError):
        session.run("true", timeout=30)


def test_a_forked_child_that_exits_normally_leaves_its_parents_sessions_open(open_session) -> None:
    session = open_session()
    child = os.fork()
    if child == 0:  # a worker forked without exec (multiprocessing's "fork", a plain os.fork) ending well
        try:
            atexit._run_exitfuncs()  # what a normal interpreter exit runs
        finally:
            os._exit(0)
    assert os.waitpid(child, 0)[1] == 0
    assert session.run("echo still here", timeout=30).stdout == "still here\n"


def test_a_forked_child_opens_runs_and_closes_sessions_of_its_own(open_session) -> None:
    parent = open_session()  # the parent's pools and spawner threads exist; a forked child has none
    child = os.fork()
    if child == 0:
        code = 1
        try:
            signal.alarm(60)  # a hang ends the child, never the test run
            opened = open_session()
            later = open_soon(lambda spec: open_session()).result(timeout=60)
            outputs = [s.run("echo child", timeout=30).stdout for s in (opened, later)]
            opened.close()
            close_soon(later)
            code = 0 if outputs == ["child\n", "child\n"] else 2
        finally:
            os._exit(code)
    assert os.waitpid(child, 0)[1] == 0
    assert parent.run("echo parent", timeout=30).stdout == "parent\n"


def test_a_forked_child_that_drops_its_copy_of_a_session_leaves_the_parents_open(open_session) -> None:
    session = open_session()
    session.run("true", timeout=30)
    child = os.fork()
    if child == 0:  # a child ending with sys.exit: the interpreter finalizes the objects it inherited
        try:
            session.__del__()  # what that finalization runs for the child's copy of the session
        finally:
            os._exit(0)
    assert os.waitpid(child, 0)[1] == 0
    assert session.run("echo still here", timeout=30).stdout == "still here\n"
