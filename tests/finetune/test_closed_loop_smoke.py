"""The closed-loop benchmark end to end on the real embedded model, at toy size: one iteration of two
variants (real agent runs in bwrap, real training, a served new policy), its JSON and its plot."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.closed_loop import Bench, main, parse_args

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),  # ~3 min on an idle 2-core machine, more under load
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


def test_one_iteration_of_two_variants_writes_paired_results_and_a_plot(
    hf_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "results"
    argv = [
        "--variants", "grpo,tapo", "--seeds", "1", "--iterations", "1", "--lr", "1e-4", "--staleness", "0",
        "--wording", "plus", "--train-tasks", "4", "--val-tasks", "2", "--tasks-per-iteration", "2",
        "--group-size", "2", "--steps", "1", "--eval-seeds", "1", "--reply-tokens", "48",
        "--home", str(hf_model.parent.parent), "--out", str(tmp_path / "runs"), "--results", str(results),
    ]  # fmt: skip
    main(argv)
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
    record = json.loads((results / "runs" / "k0" / "tapo-lr0.0001" / "seed-0.json").read_text())
    assert record["settings"]["loss"]["state_correction"] == "geo" and len(record["scores"]) == 2
    # the run folders gone (another machine), the records stand in for the runs: nothing runs again
    shutil.rmtree(tmp_path / "runs" / "k0")
    (results / "closed_loop.json").unlink()
    monkeypatch.setattr(Bench, "loop", lambda *a, **k: pytest.fail("a recorded run ran again"))
    main(argv)
    again = json.loads((results / "closed_loop.json").read_text())
    assert again["staleness"] == document["staleness"] and again["runs"] == document["runs"]


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


def _toy(hf_model: Path, tmp_path: Path, *options: str) -> list[str]:
    return [
        "--variants", "grpo", "--seeds", "1", "--lr", "1e-4", "--staleness-variants", "grpo",
        "--wording", "plus", "--train-tasks", "4", "--val-tasks", "2", "--tasks-per-iteration", "2",
        "--steps", "1", "--eval-seeds", "1", "--reply-tokens", "48", "--home", str(hf_model.parent.parent),
        "--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results"), *options,
    ]  # fmt: skip


def test_a_lagged_run_trains_every_iteration_on_rollouts_of_the_policy_k_back(
    hf_model: Path, tmp_path: Path
) -> None:
    """Lag 1: the first iteration samples the batches of iterations 1 and 2 with the base policy and
    trains on the first; the second trains on the other, one version behind (if the first published)."""
    main(_toy(hf_model, tmp_path, "--iterations", "1", "--staleness", "1", "--group-size", "2"))
    run = tmp_path / "runs" / "k1" / "grpo-lr0.0001" / "seed-0"
    for j in (1, 2):
        folder = run / "rollouts" / f"it-{j:03d}"
        assert json.loads((folder / "SAMPLED").read_text()) == {"sampled_at": 1, "policy_version": 0}
        assert len(list(folder.glob("*.json"))) == 4  # its 2 tasks x group 2, by the base policy
        batch = run / "batches" / f"it-{j:03d}"
        assert {f.name for f in batch.glob("*.json")} == {f.name for f in folder.glob("*.json")}
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    versions = [v["index"] for v in json.loads((run / "policy" / "versions.json").read_text())]
    assert [r["iteration"] for r in rows] == [0, 1, 2] and rows[1]["staleness"] == 0
    first_published = rows[1]["policy"] != rows[0]["policy"]  # (unless every group had equal rewards)
    assert rows[2]["staleness"] == (1 if first_published else 0)
    assert not (run / "rollouts" / "it-003").exists()  # nothing sampled past the run's end
    assert versions == list(range(len({r["policy"] for r in rows})))
    summary = json.loads((tmp_path / "results" / "closed_loop.json").read_text())["staleness"]["k1"]
    assert summary["variants"]["grpo"]["staleness_reached"] == rows[2]["staleness"]


def test_an_iteration_that_publishes_no_policy_keeps_the_last_measurement_of_it(
    hf_model: Path, tmp_path: Path
) -> None:
    """Groups of one have no advantage to learn from (the benchmark asks for groups of two or more; its
    loop is given one here): the iteration publishes no version, and its held-out runs (same policy,
    tasks and seeds) are not run again but named; the benchmark's curve reads them."""
    bench = Bench(parse_args(_toy(hf_model, tmp_path, "--iterations", "1", "--staleness", "0")))
    run = tmp_path / "runs" / "k0" / "grpo" / "seed-0"
    bench.loop(run, replace(bench.config("grpo", 1e-4, 0, 1), group_size=1), held_out=True)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1] and rows[1]["train_trajectories"] == 0
    assert rows[1]["policy"] == rows[0]["policy"] and rows[1]["val_from"] == 0
    assert (
        not (run / "eval" / "it-001").exists()
        and len(list((run / "rollouts" / "it-001").glob("*.json"))) == 2
    )
    assert (rows[1]["val_pass_at_1"], rows[1]["val_ci"]) == (rows[0]["val_pass_at_1"], rows[0]["val_ci"])
    scores, padded_from = bench.scores(run, 1)
    assert padded_from is None and scores.shape == (2, 2) and (scores[1] == scores[0]).all()
    assert scores[0].mean() == rows[0]["val_pass_at_1"]
