"""The closed-loop benchmark's run records: a finished run is taken from its record, never run again or
mixed with runs of other settings; summaries cover the seeds every variant has."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks import closed_loop_ledger as ledger
from benchmarks import closed_loop_stats as stats
from benchmarks.closed_loop import Bench, parse_args, run_all

ITERATIONS, LAG = 2, 4


def _bench(tmp_path: Path, *extra: str) -> Bench:
    args = parse_args([
        "--variants", "grpo,tapo", "--staleness", str(LAG), "--staleness-variants", "grpo,tapo",
        "--lr", "3e-4", "--iterations", str(ITERATIONS), "--seeds", "3", "--val-tasks", "5",
        "--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results"), *extra,
    ])  # fmt: skip
    bench = Bench(args)

    def no_runs(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a recorded run was run again")

    bench.loop = no_runs  # type: ignore[method-assign]
    return bench


def _record(bench: Bench, variant: str, seed: int, scores: np.ndarray, **changed: object) -> Path:
    iterations = ITERATIONS + LAG
    settings = ledger.run_settings(bench.args, variant, 3e-4, seed, iterations, LAG) | changed
    rows = [{"iteration": i, "staleness": min(i - 1, LAG) if i else None} for i in range(iterations + 1)]
    file = ledger.record_path(bench.args.results, LAG, variant, 3e-4, seed)
    ledger.save(file, {
        "settings": settings, "rows": rows, "diverged": None, "seed": seed, "padded_from": None,
        "collapsed": False, "max_drop": 0.0, "val_ids": bench.val_ids, "scores": scores.tolist(),
    })  # fmt: skip
    return file


def _scores(rng: np.random.Generator, bench: Bench) -> np.ndarray:
    return rng.integers(0, 3, size=(ITERATIONS + LAG + 1, len(bench.val_ids))) / 2


def test_recorded_runs_are_summarized_from_their_scores_without_running(tmp_path: Path) -> None:
    bench, rng = _bench(tmp_path), np.random.default_rng(0)
    grids = {v: np.stack([_scores(rng, bench) for _ in range(3)]) for v in ("grpo", "tapo")}
    for variant, grid in grids.items():
        for seed in range(3):
            _record(bench, variant, seed, grid[seed])
    results = run_all(bench)
    assert results["seeds"] == {"k4": [0, 1, 2]}
    block = results["staleness"]["k4"]
    for variant, grid in grids.items():
        assert block["variants"][variant]["auc"] == pytest.approx(grid[:, 1:, :].mean())
        assert block["variants"][variant]["staleness_reached"] == LAG
        assert [run["seed"] for run in results["runs"][f"k4/{variant}"]] == [0, 1, 2]
        assert "scores" not in results["runs"][f"k4/{variant}"][0]
    expected = stats.paired_difference(grids["tapo"], grids["grpo"])
    assert block["differences"]["tapo − grpo"] == expected


def test_only_seeds_every_variant_has_are_compared_and_run_seeds_leaves_the_rest(tmp_path: Path) -> None:
    bench, rng = _bench(tmp_path, "--run-seeds", "7"), np.random.default_rng(1)
    for seed in (0, 1, 2):
        _record(bench, "grpo", seed, _scores(rng, bench))
    for seed in (0, 2):
        _record(bench, "tapo", seed, _scores(rng, bench))
    results = run_all(bench)  # tapo seed 1 is missing and --run-seeds does not name it: not run
    assert results["seeds"]["k4"] == [0, 2]
    assert [run["seed"] for run in results["runs"]["k4/grpo"]] == [0, 2]


def test_nothing_recorded_and_nothing_to_run_summarizes_nothing(tmp_path: Path) -> None:
    results = run_all(_bench(tmp_path, "--run-seeds", "9"))
    assert results["seeds"] == {"k4": []} and results["staleness"] == {}


def test_a_record_of_other_settings_is_refused_naming_the_file_and_the_setting(tmp_path: Path) -> None:
    bench = _bench(tmp_path)
    file = _record(bench, "grpo", 0, _scores(np.random.default_rng(2), bench), steps=2)
    with pytest.raises(SystemExit, match=r"seed-0\.json: recorded with other settings \(steps\)"):
        run_all(bench)
    assert file.is_file()  # kept: it is someone's finished run


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda text: text[: len(text) // 2], "not a run record"),
        (lambda text: text.replace('"scores"', '"scorez"'), "not a run record"),
        (lambda text: text.replace('"val-add3-', '"val-other-'), "held-out tasks are not this benchmark's"),
    ],
)
def test_a_damaged_record_is_one_line_naming_it(tmp_path: Path, damage, message) -> None:
    bench = _bench(tmp_path)
    file = _record(bench, "grpo", 0, _scores(np.random.default_rng(3), bench))
    file.write_text(damage(file.read_text()))
    with pytest.raises(SystemExit, match=message):
        run_all(bench)


def test_a_record_is_written_whole(tmp_path: Path) -> None:
    file = tmp_path / "k4" / "seed-0.json"
    ledger.save(file, {"scores": [[1.0]]})
    ledger.save(file, {"scores": [[0.0]]})
    assert [p.name for p in file.parent.iterdir()] == ["seed-0.json"]
