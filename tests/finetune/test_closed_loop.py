"""The closed-loop benchmark's parts that decide what it claims: the factorial's variants, the task
family, lagged (stale) replay, the learning-rate choice and the paired statistics."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks import closed_loop_stats as stats
from benchmarks.closed_loop import parse_args
from benchmarks.closed_loop_sweep import choose_lr, sweep, sweep_signal
from benchmarks.closed_loop_tasks import (
    ALL_VARIANTS,
    EXTRA_VARIANTS,
    TRAIN_ALGO,
    VARIANTS,
    WORDINGS,
    write_tasks,
)
from tapo_backend.losses import compute_policy_loss
from tapo_backend.losses.config import resolve


def test_each_variant_differs_from_the_one_before_in_one_setting_only() -> None:
    names = list(VARIANTS)
    pairs = zip(names, names[1:], strict=False)
    changed = [{k for k in VARIANTS[b] if VARIANTS[a][k] != VARIANTS[b][k]} for a, b in pairs]
    assert changed == [
        {"clip_high", "aggregation"},  # DAPO: clip-higher + token mean
        {"clip_ratio_c"},
        {"state_correction"},
        {"clip_schedule", "clip_exponent"},  # the position clip is one setting spelled in two keys
    ]
    assert all(set(v) == set(VARIANTS["grpo"]) for v in ALL_VARIANTS.values())  # each spells all out
    for settings in ALL_VARIANTS.values():
        resolve(TRAIN_ALGO, **settings)  # valid for the loss the benchmark trains through


def test_the_state_correction_is_also_measured_without_the_dapo_settings() -> None:
    grpo, geo = VARIANTS["grpo"], EXTRA_VARIANTS["grpo+geo"]
    assert {k for k in grpo if grpo[k] != geo[k]} == {"state_correction"}
    assert geo["state_correction"] == VARIANTS["tapo"]["state_correction"]


@pytest.mark.parametrize("registry_name", ["grpo", "dapo", "tapo"])
def test_named_variants_are_the_registry_losses_of_that_name(registry_name: str) -> None:
    """Trained through `tapo` with every setting spelled out, `grpo`, `dapo` and `tapo` are exactly the
    registry's entries: same loss and same gradient on stale, mixed-sign batches."""
    gen = torch.Generator().manual_seed(3)
    old = -torch.rand(6, 12, generator=gen) * 3
    mask = torch.rand(6, 12, generator=gen) > 0.3
    adv = torch.randn(6, generator=gen)
    results = []
    for name, config in ((TRAIN_ALGO, VARIANTS[registry_name]), (registry_name, {})):
        noise = torch.randn(6, 12, generator=torch.Generator().manual_seed(4))
        logprobs = (old + noise * 0.4).requires_grad_()
        loss, _ = compute_policy_loss(name, logprobs, old, adv, mask, **config)
        loss.backward()
        results.append((loss.detach(), logprobs.grad))
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])


def test_the_variants_really_differ_on_a_stale_batch() -> None:
    gen = torch.Generator().manual_seed(5)
    old = -torch.rand(8, 20, generator=gen) * 3
    mask = torch.ones(8, 20, dtype=torch.bool)
    mask[:, 10:] = torch.rand(8, 10, generator=gen) > 0.5
    lp = old + torch.randn(8, 20, generator=gen) * 0.8
    adv = torch.randn(8, generator=gen)
    losses = {
        n: compute_policy_loss(TRAIN_ALGO, lp, old, adv, mask, **c)[0].item() for n, c in ALL_VARIANTS.items()
    }
    assert len({round(v, 6) for v in losses.values()}) == len(ALL_VARIANTS), losses


def test_task_sets_are_disjoint_worded_and_correct(tmp_path: Path) -> None:
    held_out = write_tasks(tmp_path / "val.jsonl", 24, 1, "sum-of")
    train = write_tasks(tmp_path / "train.jsonl", 64, 0, "sum-of", exclude=held_out)
    assert len(held_out) == 24 and len(train) == 64 and not held_out & train
    assert write_tasks(tmp_path / "again.jsonl", 24, 1, "sum-of") == held_out  # deterministic
    for line in (tmp_path / "train.jsonl").read_text().splitlines():
        row = json.loads(line)
        a, b, c = (int(x) for x in row["id"].split("-")[1:])
        assert row["problem"] == WORDINGS["sum-of"].format(a=a, b=b, c=c)
        assert row["answer"] == str(a + b + c) and all(10 <= t <= 99 for t in (a, b, c))


def test_the_sweep_reads_training_reward_after_updates_only() -> None:
    rows = [{"iteration": 0, "reward_mean": None}, {"iteration": 1, "reward_mean": 0.9},
            {"iteration": 2, "reward_mean": 0.2}, {"iteration": 3, "reward_mean": 0.4}]  # fmt: skip
    assert sweep_signal(rows, None) == pytest.approx(0.3)  # iteration 1 sampled the base: not a signal
    assert sweep_signal(rows, "the loss is nan") == float("-inf")
    assert choose_lr({3e-4: 0.5, 1e-4: 0.5, 3e-5: 0.1}) == 1e-4  # ties go to the lower rate
    assert choose_lr({3e-4: float("-inf"), 1e-4: 0.2}) == 1e-4


class _SweepRuns:
    """A bench whose training runs end as `outcomes` says per rate (a reward, or diverged)."""

    def __init__(self, outcomes: dict[float, float | None], out: Path):
        self.outcomes, self.out = outcomes, out
        self.args = parse_args(["--sweep-lrs", ",".join(f"{lr:g}" for lr in outcomes)])

    def config(self, variant: str, lr: float, seed: int, iterations: int) -> float:
        return lr

    def loop(self, run_dir: Path, lr: float, *, held_out: bool) -> dict:
        assert not held_out  # the sweep never runs the held-out tasks
        reward = self.outcomes[lr]
        rows = [{"iteration": i, "reward_mean": reward} for i in range(1, 4)]
        return {"rows": rows, "diverged": None if reward is not None else "the loss is nan"}


def test_a_sweep_with_diverged_rates_writes_valid_json_and_says_when_nothing_chose(tmp_path: Path) -> None:
    some = sweep(_SweepRuns({3e-5: 0.1, 1e-4: 0.3, 3e-4: None}, tmp_path), "grpo")
    assert some == {"signals": {"3e-05": 0.1, "0.0001": 0.3, "0.0003": None}, "chosen": 1e-4,
                    "chosen_by_default": False}  # fmt: skip
    none = sweep(_SweepRuns({1e-4: None, 3e-4: None}, tmp_path), "grpo")
    assert none["chosen"] == 1e-4 and none["chosen_by_default"]
    json.dumps([some, none], allow_nan=False)  # no -Infinity: valid JSON


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--variants", "grpo,ppo"], "--variants: unknown ppo"),
        (["--staleness", "0,x"], "--staleness: expected"),
        (["--staleness", "-1"], "--staleness: expected whole numbers >= 0"),
        (["--sweep-lrs", "0"], "--sweep-lrs: expected positive"),
        (["--wording", "nope"], "invalid choice"),
        (["--sweep-iterations", "1"], "--sweep-iterations must be at least 2"),
    ],
)
def test_bad_options_fail_with_one_line_naming_them(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert message in (str(exc.value.code) + capsys.readouterr().err)


def test_crossed_bootstrap_covers_seed_and_task_noise() -> None:
    flat = np.full((3, 10), 0.4)
    assert stats.crossed_bootstrap(flat) == pytest.approx((0.4, 0.4, 0.4))
    # tasks identical within a seed, seeds differ: the interval must still be wide (seed noise)
    seeds_differ = np.repeat(np.array([[0.0], [0.5], [1.0]]), 10, axis=1)
    mean, low, high = stats.crossed_bootstrap(seeds_differ)
    assert mean == pytest.approx(0.5) and low < 0.3 and high > 0.7
    rng = np.random.default_rng(0)
    grid = rng.random((4, 24))
    mean, low, high = stats.crossed_bootstrap(grid)
    assert low < mean < high
    with pytest.raises(ValueError):
        stats.crossed_bootstrap(np.zeros((0, 3)))


def test_paired_differences_per_iteration_and_on_the_auc() -> None:
    rng = np.random.default_rng(1)
    base = rng.random((3, 1, 8))
    a = np.concatenate([base, rng.random((3, 4, 8))], axis=1)
    same = stats.paired_difference(a, a.copy())
    assert all(r["difference"] == 0 and r["ci"] == [0, 0] for r in same["per_iteration"])
    better = a.copy()
    better[:, 1:, :] += 0.1
    diff = stats.paired_difference(better, a)
    assert diff["per_iteration"][0]["difference"] == 0  # the shared base row
    assert diff["auc"]["difference"] == pytest.approx(0.1)
    assert stats.auc(better).shape == (3, 8)
    with pytest.raises(ValueError, match="same"):
        stats.paired_difference(a, a[:2])


def test_collapse_needs_a_rise_then_a_fall_below_half_and_below_base() -> None:
    assert stats.collapse([0.2, 0.6, 0.1], base=0.2)["collapsed"]
    assert not stats.collapse([0.2, 0.6, 0.25], base=0.2)["collapsed"]  # fell but kept the base
    assert not stats.collapse([0.2, 0.1, 0.05], base=0.2)["collapsed"]  # never rose: no learning lost
    assert stats.collapse([0.2, 0.6, 0.25], base=0.2)["max_drop"] == pytest.approx(0.35)
    from_numpy = stats.collapse(list(np.array([0.2, 0.6, 0.1])), base=np.float64(0.2))
    assert json.loads(json.dumps(from_numpy)) == {"max_drop": pytest.approx(0.5), "collapsed": True}


def test_a_run_that_stopped_early_is_padded_with_its_last_policy() -> None:
    rows, start = stats.pad_curve([[0.1], [0.3]], iterations=3)
    assert rows == [[0.1], [0.3], [0.3], [0.3]] and start == 2
    assert stats.pad_curve([[0.1], [0.3]], iterations=1) == ([[0.1], [0.3]], None)
