"""Synthetic stability experiments: exact E1 properties and the E2 benchmark's --quick path."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from tapo_backend.synthetic import (
    E1_ESTIMATORS,
    StaleReplayConfig,
    estimator_bias_variance,
    paired_effect,
    stale_replay,
    summarize_curves,
)

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "tapo_stability.py"


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The experiments are many tiny ops: one thread avoids oversubscribing a loaded CI machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def load_benchmark():
    spec = importlib.util.spec_from_file_location("tapo_stability", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules["tapo_stability"] = module  # worker processes unpickle its functions by module name
    spec.loader.exec_module(module)
    return module


def test_e1_single_token_estimators_coincide_and_sequence_is_unbiased_for_grad_j():
    one = estimator_bias_variance(1, mismatch=0.5, seed=3)
    for est in E1_ESTIMATORS:
        assert one[est]["rel_var"] == pytest.approx(one["sequence"]["rel_var"])
        assert one[est]["rel_bias"] < 1e-9 and one[est]["rel_bias_grad_j"] < 1e-9
    long = estimator_bias_variance(7, mismatch=0.5, seed=3)
    assert long["sequence"]["rel_bias_grad_j"] < 1e-12
    assert long["token"]["rel_bias"] > 1e-3  # ignoring the state shift is biased off-policy


@pytest.mark.parametrize(("horizon", "mismatch", "seed"), [(4, 0.3, 0), (7, 0.5, 3), (9, 0.8, 5)])
def test_e1_identity_13_cumulative_prefix_estimator_is_unbiased_for_g_star(horizon, mismatch, seed):
    """E_μ[Σ_t Π_{j≤t} r_j R ∇log π_t] = g* = Σ_t E_{y≤t~π, y>t~μ}[R ∇log π_t], exactly (float64);
    off-policy g* is not ∇J, so E1's bias is measured against the target the estimators aim at."""
    res = estimator_bias_variance(horizon, mismatch=mismatch, seed=seed)
    assert res["cumulative"]["rel_bias"] < 1e-12
    assert res["_meta"]["g_star_vs_grad_j"] > 1e-3
    assert res["cumulative"]["rel_bias_grad_j"] == pytest.approx(res["_meta"]["g_star_vs_grad_j"])
    for est in ("token", "geo-mean", "gspo"):
        assert res[est]["rel_bias"] > 1e-6, est


def test_e1_on_policy_everything_is_the_plain_gradient():
    res = estimator_bias_variance(5, mismatch=0.0, seed=1)
    for est in E1_ESTIMATORS:
        assert res[est]["rel_bias"] < 1e-9 and res[est]["cosine"] == pytest.approx(1.0)
        assert res[est]["rel_bias_grad_j"] < 1e-9
    assert res["_meta"]["kl_mu_pi_per_token"] == pytest.approx(0.0, abs=1e-12)
    assert res["_meta"]["g_star_vs_grad_j"] < 1e-12


def test_collapse_is_measured_from_each_runs_own_best():
    curves = torch.tensor(
        [
            [0.2, 0.74, 0.5, 0.20],  # never reached 0.9, fell from 0.74 to 0.20: a crash
            [0.2, 0.95, 0.6, 0.9],  # a dip of 0.35 from 0.95: not below half its best
            [0.5, 0.92, 0.91, 0.93],
        ]
    )
    s = summarize_curves(curves)
    assert s["crash_rate"] == pytest.approx(1 / 3)
    assert s["max_drop"] == pytest.approx((0.54 + 0.35 + 0.01) / 3)
    assert s["reached_0.9"] == pytest.approx(2 / 3)
    assert s["best"] == pytest.approx((0.74 + 0.95 + 0.93) / 3)
    assert s["final"] == pytest.approx((0.20 + 0.9 + 0.93) / 3)


def test_paired_effect_is_the_mean_per_seed_difference_with_a_t_interval():
    on, off = torch.tensor([0.5, 0.7, 0.6, 0.8]), torch.tensor([0.4, 0.5, 0.5, 0.6])
    effect = paired_effect(on, off)
    diff = on - off
    half = 3.182 * float(diff.std()) / 2  # t_{0.975, 3}
    assert effect["effect"] == pytest.approx(0.15)
    assert effect["ci_low"] == pytest.approx(0.15 - half) and effect["ci_high"] == pytest.approx(0.15 + half)


def test_stale_replay_learns_on_policy():
    out = stale_replay("grpo", StaleReplayConfig(horizon=8, staleness=0, seeds=2, updates=40, lr=0.05))
    success = out["success"]
    assert success.shape == (2, 40)
    assert torch.all(success[:, -5:].mean(1) > success[:, 0] + 0.05)


@pytest.mark.slow
def test_quick_benchmark_writes_the_factorial_and_k0_variants_coincide(tmp_path):
    bench = load_benchmark()
    results = bench.main(["--quick", "--out", str(tmp_path), "--workers", "1"])
    for name in (
        "results.json",
        "e1_table.md",
        "e2_table.md",
        "e2_table.csv",
        "e2_effects.md",
        "e2_effects.csv",
        "e2_claims.md",
        "e1_bias_variance.png",
        "e2_success_curves.png",
        "e2_effects.png",
    ):
        assert (tmp_path / name).stat().st_size > 0, name
    stored = json.loads((tmp_path / "results.json").read_text())
    assert len(bench.VARIANTS) == 12  # σ {none, geo, cum} × dual {off, on} × position {off, on}
    assert len(stored["e2"]) == 12 * 2  # × the two quick regimes
    # every variant of a regime shares every setting but its three factors
    configs = [job["config"] for job in stored["e2"].values() if job["regime"] == "calibrated"]
    assert all(c == configs[0] for c in configs)
    shared = [{k: v for k, v in job["loss_config"].items() if k not in ("state_correction", "clip_ratio_c",
              "clip_exponent")} for job in stored["e2"].values()]  # fmt: skip
    assert all(s == shared[0] for s in shared)
    # staleness 0: data is on-policy, every variant reduces to the same gradient, so the runs coincide
    assert results["e2_k0_max_curve_diff"] < 1e-4
    effects = {(r["regime"], r["factor"]): r for r in results["e2_effects"]}
    assert effects[("on-policy", "dual clip (on − off)")]["auc_effect"] == pytest.approx(0.0, abs=1e-4)
    assert {"auc_ci_low", "auc_ci_high", "crashed_effect"} <= set(effects[("calibrated", "σ geo − none")])
    assert "95% CI" in (tmp_path / "e2_claims.md").read_text()


def test_gspo_window_report_measures_clipping_per_staleness(tmp_path):
    bench = load_benchmark()
    results = bench.main(["--quick", "--only", "gspo", "--out", str(tmp_path), "--gspo-updates", "12"])
    rows = {row["staleness"]: row for row in results["gspo_window"]}
    assert set(rows) == {0, 4, 16}
    assert rows[0]["paper_window_clip_frac"] == 0.0  # on-policy: the sequence ratio is exactly 1
    assert rows[16]["paper_window_clip_frac"] > 0.0
    assert (tmp_path / "gspo_window.md").stat().st_size > 0
