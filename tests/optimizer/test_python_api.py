"""`recreate.optimize()` makes the run `recreate evolve` makes, and `recreate.load_run()` reads any run
back: scripted LLM choices through the real OpenAI client against the local server, real bubblewrap
sandboxes, the real experience store and scaffold store."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import recreate
from recreate.domains import get_domain
from recreate.optimizer import EvolveConfig
from recreate.runs import UNFINISHED, RunNotFound
from recreate.scaffold import Scaffold, ScaffoldStore, load_scaffold
from tests.optimizer.script import EVALUATOR, GATE_ALPHA, WORDS, responder
from tests.optimizer.test_evolve import SEED
from tests.optimizer.test_evolve_cli import clean_env, evolve_args


def words(**splits: float):
    return get_domain("jsonl", data=WORDS / "tasks.jsonl", evaluator=EVALUATOR, **splits)


def run_files(run_dir: Path) -> set[str]:
    """What a run leaves for its user (not the caches, which differ by design: ids, timings)."""
    kept = {"config.json", "result.json", "report", "scaffold", "checkpoints.sqlite", "ledger.jsonl"}
    return {
        str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.relative_to(run_dir).parts[0] in kept
    }


def test_optimize_leaves_what_the_cli_leaves_and_returns_the_final_scaffold(
    recreate_home, openai_server, monkeypatch
):
    openai_server.responder = responder
    cli_home = recreate_home.parent / "cli-home"
    args = evolve_args(cli_home, openai_server.url, "--rounds", "1", "--run-id", "same")
    done = subprocess.run(args, capture_output=True, text=True, env=clean_env(), timeout=300)
    assert done.returncode == 0, done.stderr

    monkeypatch.setenv("RECREATE_EMBEDDING", "hash")
    model = f"scripted@{openai_server.url}"
    result = recreate.optimize(
        SEED,
        words(),
        model=model,
        config=EvolveConfig(gate_alpha=GATE_ALPHA, rounds=1, batch_size=3),
        run_id="same",
        sandbox="bwrap",
    )

    cli_dir = cli_home / "runs" / "same"
    assert run_files(result.run_dir) == run_files(cli_dir)
    assert {"report/report.html", "scaffold/scaffold.yaml"} <= run_files(cli_dir)
    cli_result = json.loads((cli_dir / "result.json").read_text())
    assert set(cli_result) == set(result.to_json())
    assert [h["accepted"] for h in cli_result["history"]] == [h["accepted"] for h in result.history]
    assert load_scaffold(cli_dir / "scaffold").content_hash() == result.scaffold.content_hash()
    # the result holds the final version as an object, its directory, the report and the model spec
    assert isinstance(result.scaffold, Scaffold) and result.scaffold.ref == result.final
    assert [r.id for r in result.scaffold.rules] == ["lower"]
    assert load_scaffold(result.scaffold_dir).content_hash() == result.scaffold.content_hash()
    assert result.report == result.run_dir / "report" / "report.html" and result.report.stat().st_size
    assert result.model == model and result.weights is None and result.finished
    assert [r["round"] for r in result.rounds] == [1] and result.rounds[0]["gate"]["accepted"]


def test_load_run_reads_a_finished_run_back_by_id_or_directory(recreate_home, openai_server, monkeypatch):
    openai_server.responder = responder
    monkeypatch.setenv("RECREATE_EMBEDDING", "hash")
    model = f"scripted@{openai_server.url}"
    config = EvolveConfig(gate_alpha=0.25, rounds=1, batch_size=3, test_seeds=2)  # 2 validation tasks
    result = recreate.optimize(SEED, words(train=0.5, val=0.2), model=model, config=config, sandbox="bwrap")
    assert result.test and result.test["tasks"] == 1  # the final test on the untouched test split

    for where in (result.run_id, result.run_dir, str(result.run_dir)):
        loaded = recreate.load_run(where, home=recreate_home)
        assert (
            loaded.to_json() == result.to_json() == json.loads((result.run_dir / "result.json").read_text())
        )
        assert loaded.scaffold.content_hash() == result.scaffold.content_hash()
        assert loaded.config["run_id"] == result.run_id and loaded.config["agent_spec"] == model
        assert loaded.rounds == result.rounds
    # the README's way on: the loaded run's final scaffold and model as an agent (its lowercase rule)
    agent = recreate.create_domain_agent(loaded.scaffold, model=loaded.model, sandbox="bwrap")
    assert agent.invoke({"task": "Reply with the word: Kilo"})["submission"] == "kilo"
    moved = recreate_home.parent / "elsewhere" / "run"
    moved.parent.mkdir()
    result.run_dir.rename(moved)  # out of any home: the scaffold comes from the exported directory
    loaded = recreate.load_run(moved)
    assert loaded.final == result.final and loaded.scaffold.content_hash() == result.scaffold.content_hash()


def test_load_run_reads_a_stopped_and_a_killed_run(recreate_home, openai_server, monkeypatch):
    openai_server.responder = responder
    monkeypatch.setenv("RECREATE_EMBEDDING", "hash")
    config = EvolveConfig(gate_alpha=GATE_ALPHA, rounds=2, batch_size=3, max_rollouts=5)
    stopped = recreate.optimize(SEED, words(), model=f"scripted@{openai_server.url}", config=config)
    assert "rollouts" in stopped.stopped and stopped.report.is_file()  # a stopped run has its report too

    loaded = recreate.load_run(stopped.run_id)
    assert loaded.stopped == stopped.stopped and not loaded.finished
    assert loaded.final == stopped.final and loaded.history == stopped.history
    (stopped.run_dir / "result.json").unlink()  # as a kill -9 leaves it: the checkpoints are the truth
    killed = recreate.load_run(stopped.run_id)
    assert killed.stopped == UNFINISHED and killed.history == stopped.history
    assert (
        killed.scaffold.content_hash()
        == ScaffoldStore(recreate_home / "scaffolds").load(stopped.final).content_hash()
    )

    for path in stopped.run_dir.iterdir():  # killed before its first checkpoint: a config only
        if path.name != "config.json":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    bare = recreate.load_run(stopped.run_dir)
    assert bare.final is None and bare.scaffold is None and bare.stopped == UNFINISHED and bare.config


def test_an_unknown_run_is_one_line_naming_the_arguments(recreate_home):
    (recreate_home / "runs" / "real").mkdir(parents=True)
    (recreate_home / "runs" / "real" / "config.json").write_text("{}")
    with pytest.raises(RunNotFound) as caught:
        recreate.load_run("nope")
    message = str(caught.value)
    assert "run_id_or_path" in message and "home=" in message and "real" in message and "--" not in message


def test_fine_tuning_from_python_needs_the_local_model_and_says_so_in_arguments(recreate_home):
    from recreate.finetune.evolve_step import FinetuneSettings

    with pytest.raises(ValueError) as caught:
        recreate.optimize(SEED, words(), model="openai:gpt-4.1-mini", finetune=FinetuneSettings(every=1))
    assert "model='local'" in str(caught.value) and "--" not in str(caught.value).split("`")[0]
    assert "--model local" in caught.value.for_cli() and "--finetune-every" in caught.value.for_cli()
    assert not (recreate_home / "runs").exists()


def test_a_domain_name_or_a_dict_of_settings_is_one_line_naming_the_argument(recreate_home):
    with pytest.raises(ValueError, match=r"^domain is 'jsonl', not a Domain: pass one, e.g. get_domain"):
        recreate.optimize(SEED, "jsonl", model="scripted@http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match=r"^config is a dict, not an EvolveConfig: pass EvolveConfig"):
        recreate.optimize(SEED, words(), model="scripted@http://127.0.0.1:9/v1", config={"rounds": 1})
    assert not (recreate_home / "runs").exists()


def test_the_final_model_of_a_fine_tuning_run_is_its_accepted_weights(tmp_path):
    from recreate.runs import final_model

    rows = [
        {"index": 0, "name": "base", "hf_dir": "/h/base", "gguf": "/h/base.gguf", "candidate": False},
        {
            "index": 1,
            "name": "base+ft1-ab",
            "hf_dir": str(tmp_path / "v1"),
            "gguf": str(tmp_path / "v1.gguf"),
        },
    ]  # as ServedPolicy writes policy/versions.json
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "versions.json").write_text(json.dumps(rows))
    tuned = {"agent_model": "base", "finetune": {"every": 1}}
    assert final_model(tmp_path, tuned, "base+ft1-ab") == (f"local:{tmp_path / 'v1.gguf'}", tmp_path / "v1")
    assert final_model(tmp_path, tuned, "base") == ("local", None)  # no version accepted: the embedded one
    assert final_model(tmp_path, {"agent_model": "m@http://h/v1", "agent_spec": "m@http://h:8/v1"}, None) == (
        "m@http://h:8/v1",
        None,
    )
