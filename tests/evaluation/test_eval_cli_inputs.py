"""`recreate eval` refuses an unreachable endpoint in one line with its URL, before any rollout."""

from __future__ import annotations

import sys
import time

import pytest

from recreate.cli import main
from tests.evaluation.conftest import EVALUATOR, EXAMPLE, MINIMAL, write_tasks


def test_unreachable_endpoint_is_one_line_with_the_url(monkeypatch, capsys, recreate_home, tmp_path):
    url = "http://127.0.0.1:9/v1"  # the discard port: connection refused
    data = write_tasks(tmp_path / "tasks.jsonl", 2)
    argv = ["recreate", "eval", "--scaffold", str(MINIMAL), "--domain", "jsonl", "--data", str(data)]
    argv += [
        "--split",
        "all",
        "--model",
        f"m@{url}",
        "--evaluator",
        EVALUATOR,
        "-o",
        f"evaluator_dir={EXAMPLE}",
    ]
    monkeypatch.setattr(sys, "argv", [*argv, "--no-progress", "--sandbox", "local"])
    started = time.monotonic()
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    said = f"error: --model m@{url}: cannot reach the model endpoint {url}"
    assert done.value.code == 2 and err.startswith(said)
    assert err.count("\n") == 1 and time.monotonic() - started < 20
