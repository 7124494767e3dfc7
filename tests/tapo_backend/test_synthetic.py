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


def test_crash_metric_counts_only_falls_after_reaching_the_threshold():
    curves = torch.tensor([[0.2, 0.95, 0.4, 0.9], [0.2, 0.6, 0.3, 0.2], [0.5, 0.92, 0.91, 0.93]])
    s = summarize_curves(curves)
    assert s["crash_rate"] == pytest.approx(1 / 3) and s["reached_0.9"] == pytest.approx(2 / 3)
    assert s["best"] == pytest.approx((0.95 + 0.6 + 0.93) / 3)
    assert s["final"] == pytest.approx((0.9 + 0.2 + 0.93) / 3)


def test_stale_replay_learns_on_policy():
    out = stale_replay("grpo", StaleReplayConfig(horizon=8, staleness=0, seeds=2, updates=40, lr=0.05))
    success = out["success"]
    assert success.shape == (2, 40)
    assert torch.all(success[:, -5:].mean(1) > success[:, 0] + 0.05)


@pytest.mark.slow
def test_quick_benchmark_writes_tables_plots_and_k0_losses_coincide(tmp_path):
    bench = load_benchmark()
    results = bench.main(["--quick", "--out", str(tmp_path), "--workers", "1"])
    for name in (
        "results.json",
        "e1_table.md",
        "e1_table.csv",
        "e2_table.md",
        "e2_table.csv",
        "e1_bias_variance.png",
        "e2_success_curves.png",
        "e2_crash_rate.png",
    ):
        assert (tmp_path / name).stat().st_size > 0, name
    stored = json.loads((tmp_path / "results.json").read_text())
    assert len(stored["e2"]) == len(bench.VARIANTS) * 2 * 2  # variants x horizons x staleness
    # k=0: data is on-policy, every loss reduces to the same gradient, so the runs coincide.
    assert all(diff < 1e-4 for diff in results["e2_k0_max_curve_diff"].values())
    assert set(results["e2_k0_max_curve_diff"]) == {"8", "16"}
    stale = [job for job in stored["e2"].values() if job["staleness"] == 4]
    assert max(max(job["clip_frac"]) for job in stale) > 0  # staleness does move the ratios
    table = (tmp_path / "e2_table.md").read_text()
    assert "crash_rate" in table and "tapo p=-0.5" in table
