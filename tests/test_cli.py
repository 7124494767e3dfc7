import os
import subprocess
import sys

from recreate import __version__


def recreate(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "300"}  # no table wrapping
    return subprocess.run(
        [sys.executable, "-m", "recreate", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_version_and_help():
    assert recreate("--version").stdout.strip() == f"recreate {__version__}"
    out = recreate("--help").stdout
    assert "doctor" in out


def test_doctor_reports_every_check(recreate_home):
    res = recreate("doctor", "--base-url", "http://127.0.0.1:9/v1")
    for name in ("python", "sandbox: bwrap", "chroma", "embeddings", "torch", "model endpoint"):
        assert name in res.stdout
    assert "unreachable" in res.stdout
    assert res.returncode == 0


def test_doctor_sees_a_live_endpoint(recreate_home, openai_server):
    res = recreate("doctor", "--base-url", openai_server.url)
    assert f"{openai_server.url} answered 200" in res.stdout


def test_user_errors_are_one_line_exit_2(recreate_home, tmp_path):
    (tmp_path / "recreate.toml").write_text("model = [")
    res = recreate("doctor")
    assert res.returncode == 2
    assert res.stderr.startswith("error: ") and "malformed TOML" in res.stderr
    assert "Traceback" not in res.stderr


def test_exit_codes_of_subcommands_propagate(recreate_home):
    assert recreate("sandbox", "run", "--sandbox", "bwrap", "--", "sh", "-c", "exit 7").returncode == 7
    bad = recreate_home.parent / "bad"
    bad.mkdir()
    (bad / "scaffold.yaml").write_text("name: x\n")
    assert recreate("scaffold", "validate", str(bad)).returncode == 1
