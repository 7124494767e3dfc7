"""The closed-loop benchmark end to end on the real embedded model, at toy size: one iteration of two
variants (real agent runs in bwrap, real training, a served new policy), its JSON and its plot."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.closed_loop import main

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),  # ~3 min on an idle 2-core machine, more under load
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


def test_one_iteration_of_two_variants_writes_paired_results_and_a_plot(
    hf_model: Path, tmp_path: Path
) -> None:
    results = tmp_path / "results"
    main([
        "--variants", "grpo,tapo", "--seeds", "1", "--iterations", "1", "--lr", "1e-4", "--staleness", "0",
        "--wording", "plus", "--train-tasks", "4", "--val-tasks", "2", "--tasks-per-iteration", "2",
        "--group-size", "2", "--steps", "1", "--eval-seeds", "1", "--reply-tokens", "48",
        "--home", str(hf_model.parent.parent), "--out", str(tmp_path / "runs"), "--results", str(results),
    ])  # fmt: skip
    document = json.loads((results / "closed_loop.json").read_text())
    assert (results / "closed_loop.png").stat().st_size > 10_000
    assert document["lr"] == {"grpo": 1e-4, "tapo": 1e-4} and document["sweep"] == {}
    block = document["staleness"]["k0"]
    assert list(block["variants"]) == ["grpo", "tapo"]
    for variant in block["variants"].values():
        assert [r["iteration"] for r in variant["curve"]] == [0, 1]
        assert all(0 <= r["ci"][0] <= r["pass_at_1"] <= r["ci"][1] <= 1 for r in variant["curve"])
    difference = block["differences"]["tapo − grpo"]
    assert difference["per_iteration"][0] == {"iteration": 0, "difference": 0.0, "ci": [0.0, 0.0]}  # one base
    for run in document["runs"]["k0/grpo"] + document["runs"]["k0/tapo"]:
        assert [r["iteration"] for r in run["rows"]] == [0, 1] and run["diverged"] is None
    settings = json.loads((tmp_path / "runs" / "k0" / "tapo-lr0.0001" / "seed-0" / "config.json").read_text())
    assert settings["loss"]["state_correction"] == "geo" and settings["algo"] == "tapo"
    # a published iteration keeps its adapter, not its training state (a model's worth each iteration)
    runs = sorted((tmp_path / "runs" / "k0").glob("*/seed-0"))
    assert len(runs) == 2 and all((run / "train" / "it-001" / "final").is_dir() for run in runs)
    assert not list((tmp_path / "runs").glob("**/checkpoints"))


def test_the_sweep_alone_picks_a_rate_per_variant_from_training_runs_only(
    hf_model: Path, tmp_path: Path
) -> None:
    results, runs = tmp_path / "results", tmp_path / "runs"
    main([
        "--variants", "grpo", "--sweep-only", "--sweep-lrs", "1e-4,3e-4", "--sweep-iterations", "2",
        "--wording", "plus", "--train-tasks", "4", "--val-tasks", "2", "--tasks-per-iteration", "2",
        "--group-size", "2", "--steps", "1", "--eval-seeds", "1", "--reply-tokens", "48",
        "--home", str(hf_model.parent.parent), "--out", str(runs), "--results", str(results),
    ])  # fmt: skip
    sweep = json.loads((results / "sweep.json").read_text())["sweep"]
    assert list(sweep) == ["grpo"] and set(sweep["grpo"]["signals"]) == {"0.0001", "0.0003"}
    assert sweep["grpo"]["chosen"] in (1e-4, 3e-4)
    assert all(0.0 <= signal <= 1.0 for signal in sweep["grpo"]["signals"].values())
    assert not (runs / "base").exists() and not (runs / "k0").exists()  # nothing held out was run
    assert not list(runs.glob("sweep/*/*/eval")) and not (results / "closed_loop.json").exists()


class _Killed(BaseException):
    pass


def test_a_run_killed_after_publishing_trains_that_iteration_again_from_the_policy_before(
    hf_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import recreate.finetune.online as online

    argv = [
        "--variants", "grpo", "--seeds", "1", "--iterations", "1", "--lr", "1e-4", "--staleness", "0",
        "--wording", "plus", "--train-tasks", "4", "--val-tasks", "2", "--tasks-per-iteration", "2",
        "--group-size", "2", "--steps", "1", "--eval-seeds", "1", "--reply-tokens", "48",
        "--home", str(hf_model.parent.parent), "--out", str(tmp_path / "runs"),
        "--results", str(tmp_path / "r"),
    ]  # fmt: skip
    scored = online.pass_at_1

    def killed_after_the_base_row(trajectories):  # iteration 1's held-out score: its policy is published
        if any(t.metadata.get("policy_version") == 1 for t in trajectories):
            raise _Killed
        return scored(trajectories)

    monkeypatch.setattr(online, "pass_at_1", killed_after_the_base_row)
    with pytest.raises(_Killed):
        main(argv)
    run = tmp_path / "runs" / "k0" / "grpo-lr0.0001" / "seed-0"
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 1
    assert [v["index"] for v in json.loads((run / "policy" / "versions.json").read_text())] == [0, 1]

    monkeypatch.setattr(online, "pass_at_1", scored)
    main(argv)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    versions = json.loads((run / "policy" / "versions.json").read_text())
    assert [v["index"] for v in versions] == [0, 1]  # trained once from v0, not again on top of v1
    assert [r["iteration"] for r in rows] == [0, 1] and rows[1]["policy"] == versions[-1]["name"]
    # only the second attempt's runs are trained on and scored (2 tasks x group 2; 2 held-out x 1 seed)
    assert len(list((run / "rollouts" / "it-001").glob("*.json"))) == 4
    assert len(list((run / "batches" / "it-001").glob("*.json"))) == 4
    assert len(list((run / "eval" / "it-001").glob("*.json"))) == 2
    # a finished run is read, not served again (its policy weights may be gone)
    for weights in (run / "policy").glob("v*.gguf"):
        weights.unlink()
    main(argv)
    assert [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()] == rows


def test_an_iteration_that_publishes_no_policy_keeps_the_last_measurement_of_it(
    hf_model: Path, tmp_path: Path
) -> None:
    """At lag 1 the first iteration fills the pipeline and trains nothing: its policy is the base, whose
    held-out runs (same tasks, same seeds) are not run again but named; the curve reads them."""
    results, runs = tmp_path / "results", tmp_path / "runs"
    main([
        "--variants", "grpo", "--seeds", "1", "--iterations", "1", "--lr", "1e-4", "--staleness", "1",
        "--staleness-variants", "grpo", "--wording", "plus", "--train-tasks", "4", "--val-tasks", "2",
        "--tasks-per-iteration", "2", "--group-size", "2", "--steps", "1", "--eval-seeds", "1",
        "--reply-tokens", "48", "--home", str(hf_model.parent.parent), "--out", str(runs),
        "--results", str(results),
    ])  # fmt: skip
    run = runs / "k1" / "grpo-lr0.0001" / "seed-0"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2]
    assert rows[1]["policy"] == rows[0]["policy"] and rows[1]["val_from"] == 0
    assert (
        not (run / "eval" / "it-001").exists()
        and len(list((run / "rollouts" / "it-001").glob("*.json"))) == 4
    )
    assert (rows[1]["val_pass_at_1"], rows[1]["val_ci"]) == (rows[0]["val_pass_at_1"], rows[0]["val_ci"])
    published = rows[2]["policy"] != rows[1]["policy"]  # (unless every group had equal rewards)
    assert (run / "eval" / "it-002").is_dir() == published and (rows[2]["val_from"] is None) == published
    curve = json.loads((results / "closed_loop.json").read_text())["staleness"]["k1"]["variants"]["grpo"]
    assert [r["iteration"] for r in curve["curve"]] == [0, 1, 2]
    assert curve["curve"][1]["pass_at_1"] == curve["curve"][0]["pass_at_1"] == rows[0]["val_pass_at_1"]
