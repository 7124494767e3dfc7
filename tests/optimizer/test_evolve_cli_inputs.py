"""`recreate evolve` refuses bad input before any model call, in one line that names the option."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from recreate.cli import main
from recreate.domains import get_domain
from recreate.experience.store import ExperienceStore
from recreate.optimizer import EvolveConfig, EvolveError, ReCreateOptimizer
from tests.optimizer.script import EVALUATOR, WORDS
from tests.optimizer.test_evolve import SEED

UNREACHABLE = "http://127.0.0.1:9/v1"  # the discard port: connection refused


def evolve(monkeypatch, capsys, home: Path, *extra: str) -> tuple[int, str]:
    """Run `recreate evolve` in this process; -> (exit code, stderr)."""
    argv = [
        "recreate",
        "evolve",
        "--seed",
        str(SEED),
        "--domain",
        "jsonl",
        "--data",
        str(WORDS / "tasks.jsonl"),
    ]
    argv += ["--evaluator", EVALUATOR, "--rounds", "1", "--batch-size", "2", "--home", str(home), *extra]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setenv("RECREATE_EMBEDDING", "hash")
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RECREATE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as done:
        main()
    return done.value.code, capsys.readouterr().err


def one_line(err: str) -> str:
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--budget-usd", "0"),
        ("--budget-usd", "-1"),
        ("--budget-usd", "lots"),
        ("--max-tokens", "0"),
        ("--max-rollouts", "-3"),
        ("--max-wall-s", "0"),
        ("--rounds", "0"),
        ("--price", "gpt-x=1"),
        ("--val-limit", "0"),  # no validation set: refused before a server starts
        ("--val-limit", "-1"),  # a slice would silently drop the last task
        ("--train-limit", "0"),
        ("--min-improvement", "nan"),  # was taken: every candidate was then rejected
        ("--min-improvement", "-inf"),
        ("--max-wall-s", "nan"),
        ("--max-wall-s", "inf"),
        ("--budget-usd", "inf"),
        ("--price", "gpt-x=nan,1"),
    ],
)
def test_bad_numbers_are_one_line_naming_the_option(
    monkeypatch, capsys, recreate_home, openai_server, option, value
):
    code, err = evolve(monkeypatch, capsys, recreate_home, "--model", f"m@{openai_server.url}", option, value)
    assert code == 2 and f"'{option}'" in one_line(err)
    assert not openai_server.requests


def test_resume_of_an_unknown_run_is_refused(monkeypatch, capsys, recreate_home, openai_server):
    code, err = evolve(
        monkeypatch, capsys, recreate_home, "--model", f"m@{openai_server.url}", "--resume", "nope"
    )
    assert code == 2 and "'--resume'" in one_line(err) and "no run 'nope'" in err and "--run nope" in err
    assert not (recreate_home / "runs" / "nope").exists() and not openai_server.requests


def _build_run(home: Path, url: str, force: bool = False, **config) -> None:
    """A run as `evolve --rounds 1 --batch-size 2` leaves it once started (its config stored)."""
    domain = get_domain("jsonl", data=WORDS / "tasks.jsonl", evaluator=EVALUATOR)
    ReCreateOptimizer(
        optimizer_model=f"m@{url}",
        agent_model=f"m@{url}",
        home=home,
        sandbox="local",
        experience=ExperienceStore(home / "experience", embedding="hash"),
        config=EvolveConfig(**{"rounds": 1, "batch_size": 2} | config),
    ).build(
        seed=SEED,
        domain=domain,
        trainset=domain.tasks("train"),
        valset=domain.tasks("val"),
        run_id="r1",
        force=force,
    )


def test_resume_with_another_config_names_the_keys(monkeypatch, capsys, recreate_home, openai_server):
    _build_run(recreate_home, openai_server.url)
    code, err = evolve(
        monkeypatch, capsys, recreate_home, "--model", f"m@{openai_server.url}", "--resume", "r1",
        "--batch-size", "3", "--val-limit", "1", "--max-rollouts", "50",
    )  # fmt: skip
    assert code == 2 and "evolve.batch_size, val differ" in one_line(err) and "--force" in err
    assert not openai_server.requests


@pytest.mark.parametrize(
    ("name", "data", "said"),
    [
        ("config.json", b"[1]", "config.json is not a JSON object"),
        ("spent.json", b'{"rollouts": 3, "wa', "spent.json cannot be read as JSON"),
        (
            "checkpoints.sqlite",
            b"garbage" * 1000,
            "checkpoints.sqlite cannot be read as the run's checkpoints",
        ),
    ],
)
def test_resume_of_a_run_with_a_damaged_file_is_one_line_naming_it(
    monkeypatch, capsys, recreate_home, openai_server, name, data, said
):
    _build_run(recreate_home, openai_server.url)
    (recreate_home / "runs" / "r1" / name).write_bytes(data)
    code, err = evolve(
        monkeypatch, capsys, recreate_home, "--model", f"m@{openai_server.url}", "--resume", "r1"
    )
    assert code == 2 and said in one_line(err) and err.rstrip().endswith("or start a new run")
    assert (recreate_home / "runs" / "r1" / name).read_bytes() == data and not openai_server.requests


def test_force_accepts_another_config_and_budgets_may_change(recreate_home, openai_server):
    _build_run(recreate_home, openai_server.url)
    with pytest.raises(EvolveError, match="evolve.batch_size differ"):
        _build_run(recreate_home, openai_server.url, batch_size=3)
    _build_run(recreate_home, openai_server.url, max_rollouts=9, max_wall_s=60.0)  # a larger budget: fine
    _build_run(recreate_home, openai_server.url, batch_size=3, force=True)
    stored = json.loads((recreate_home / "runs" / "r1" / "config.json").read_text())
    assert stored["evolve"]["batch_size"] == 3  # the accepted config is the run's config from now on


def test_unreachable_endpoint_is_one_line_with_the_url(monkeypatch, capsys, recreate_home):
    started = time.monotonic()
    code, err = evolve(monkeypatch, capsys, recreate_home, "--model", f"m@{UNREACHABLE}")
    assert code == 2 and f"cannot reach the model endpoint {UNREACHABLE}" in one_line(err)
    assert time.monotonic() - started < 20  # not minutes of retries


def test_unpriced_model_under_a_usd_budget_is_refused_before_any_call(monkeypatch, capsys, recreate_home):
    remote = "mystery-model@http://models.example.invalid/v1"
    code, err = evolve(monkeypatch, capsys, recreate_home, "--model", remote, "--budget-usd", "5")
    assert code == 2 and "no price known for the agent model" in one_line(err)
    for fix in ("--price mystery-model=IN,OUT", "--max-tokens", "--budget-usd none"):
        assert fix in err
    assert not (recreate_home / "runs").exists()
    for ok in (["--price", "mystery-model=0.5,1.5"], ["--budget-usd", "none"], ["--max-tokens", "9000"]):
        args = ["--model", remote, *(["--budget-usd", "5"] if ok[0] == "--price" else []), *ok]
        code, err = evolve(monkeypatch, capsys, recreate_home, *args)
        assert code == 2 and "cannot reach the model endpoint" in one_line(err)  # past the price check


def test_a_malformed_price_in_recreate_toml_is_one_line_before_the_run(monkeypatch, capsys, recreate_home):
    (recreate_home.parent / "recreate.toml").write_text('[recreate.prices]\n"m" = {input = "cheap"}\n')
    code, err = evolve(monkeypatch, capsys, recreate_home, "--model", f"m@{UNREACHABLE}")
    assert code == 2 and "price of 'm'" in one_line(err) and "--price MODEL=IN,OUT" in err


def test_a_home_that_cannot_be_written_is_one_line_naming_home(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, openai_server
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # (a read-only mount reads the same; root writes through chmod)
    code, err = evolve(monkeypatch, capsys, blocker / "home", "--model", f"m@{openai_server.url}")
    assert code == 2 and "'--home'" in one_line(err) and "cannot write there" in err
    assert not openai_server.requests


def test_the_local_notice_says_why_the_embedded_model_runs() -> None:
    from recreate.optimizer.cli import _why_local

    assert _why_local(None, None, None, None) == "no model endpoint configured"
    assert _why_local("local", None, None, None) == "--model local"
    assert _why_local(None, None, "local", None) == "--model local"  # RECREATE_MODEL=local says so too


def test_an_unreachable_optimizer_model_is_named_before_anything_starts(
    monkeypatch, capsys, recreate_home, openai_server
):
    code, err = evolve(
        monkeypatch, capsys, recreate_home, "--model", f"m@{openai_server.url}",
        "--optimizer-model", f"o@{UNREACHABLE}", "--run", "early",
    )  # fmt: skip
    assert code == 2 and f"--optimizer-model o@{UNREACHABLE}: cannot reach" in one_line(err)
    assert "fix --optimizer-model" in err
    assert not (recreate_home / "runs" / "early").exists()  # nothing to resume, nothing left behind


def test_an_openai_model_without_a_key_is_one_line_naming_the_option(
    monkeypatch, capsys, recreate_home, openai_server
):
    code, err = evolve(
        monkeypatch, capsys, recreate_home, "--model", f"m@{openai_server.url}",
        "--optimizer-model", "openai:gpt-4.1-mini",
    )  # fmt: skip
    assert code == 2 and "--optimizer-model openai:gpt-4.1-mini: OPENAI_API_KEY is not set" in one_line(err)


def test_a_refused_key_is_one_line_before_any_call(monkeypatch, capsys, recreate_home):
    import http.server
    import threading

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(401)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        code, err = evolve(monkeypatch, capsys, recreate_home, "--model", f"m@{url}")
    finally:
        server.shutdown()
    assert code == 2 and "refused the key (HTTP 401); check OPENAI_API_KEY" in one_line(err)
    assert "recreate model key --home HOME" in one_line(err)  # on 127.0.0.1: perhaps ours, of another home
    # no --model, OPENAI_BASE_URL at that server: the same advice (was "lists no model (KeyError)")
    from recreate.optimizer.run import EndpointMissing, agent_model_spec

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(EndpointMissing, match=r"refused the key \(HTTP 401\).*recreate model key --home"):
            agent_model_spec(None, f"http://127.0.0.1:{server.server_address[1]}/v1")
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--finetune-every", "2"], "no fine-tuning step would run; pass at most 1"),  # --rounds 1
        (["--finetune-every", "1", "--finetune-algo", "nope"], "'--finetune-algo'"),
        (["--finetune-every", "1", "--model", "openai:gpt-4.1-mini"], "trains the local model"),
    ],
)
def test_fine_tuning_options_are_checked_also_by_a_dry_run(monkeypatch, capsys, recreate_home, extra, said):
    code, err = evolve(monkeypatch, capsys, recreate_home, *extra, "--dry-run")
    assert code == 2 and said in one_line(err)


def test_a_missing_tasks_file_names_data(monkeypatch, capsys, recreate_home, openai_server, tmp_path):
    missing = tmp_path / "nowhere.jsonl"
    model = f"m@{openai_server.url}"
    code, err = evolve(monkeypatch, capsys, recreate_home, "--model", model, "--data", str(missing))
    assert code == 2 and f"--data {missing}: no such file or folder" in one_line(err)
