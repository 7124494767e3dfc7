"""`recreate doctor`: plain-text hints survive the table, and the exit code says whether the
configured setup can run."""

from __future__ import annotations

from rich.console import Console

from recreate.doctor import Check, checks_table, missing_needs
from tests.test_cli import recreate


def test_fix_hints_and_details_keep_their_brackets() -> None:
    console = Console(record=True, width=200)
    row = Check("sandbox: docker", False, "cannot reach [unix:///x]", "pip install 'recreate[docker]'")
    console.print(checks_table([row]))
    text = console.export_text()
    assert "pip install 'recreate[docker]'" in text and "cannot reach [unix:///x]" in text


def test_only_needed_rows_count_as_missing() -> None:
    rows = [
        Check("torch", False, "not installed", needed=False),
        Check("sandbox: bwrap", True, "bubblewrap 0.8.0", needed=True),
        Check("sandbox: docker", False, "unreachable", needed=True),
    ]
    assert [c.name for c in missing_needs(rows)] == ["sandbox: docker"]


def test_doctor_exits_1_when_the_configured_sandbox_is_missing(recreate_home, monkeypatch) -> None:
    # (with the default bwrap setup, a missing docker is no failure: tests/test_cli.py)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{recreate_home}/no-engine.sock")
    monkeypatch.setenv("RECREATE_SANDBOX", "docker")
    broken = recreate("doctor", "--base-url", "http://127.0.0.1:9/v1")
    assert broken.returncode == 1
    assert "missing for the configured setup: sandbox: docker" in broken.stderr
    assert "set DOCKER_HOST=unix://SOCKET" in broken.stdout


def test_doctor_reports_the_local_model_rows_needed_when_no_endpoint_is_set(monkeypatch, tmp_path):
    from recreate.doctor import check_local_models

    rows = {row.name: row for row in check_local_models(tmp_path, needed=True)}
    assert {"local: embedded model", "local: llamacpp engine", "local: vllm engine"} <= set(rows)
    assert rows["local: embedded model"].needed and rows["local: llamacpp engine"].needed
    assert not rows["local: vllm engine"].needed  # only the training loop needs it
