"""TAPO stability experiments E1 and E2 (see tapo_backend/synthetic.py), CPU only.

    python benchmarks/tapo_stability.py                 # E1 + the E2 factorial in both regimes (minutes)
    python benchmarks/tapo_stability.py --quick         # small smoke configuration, seconds
    python benchmarks/tapo_stability.py --only e2 --regimes reference --workers 2

Writes under --out (default .recreate/benchmarks/tapo_stability): results.json (updated after every
finished E2 job, so `--resume` continues an interrupted sweep and `--report-only` tabulates it),
e1_table.{md,csv}, e1_bias_variance.png, e2_table.{md,csv} (one row per variant and regime),
gspo_window.{md,csv} (GSPO's sequence ratio per staleness: the clip fraction of the paper's window
3e-4/4e-4 and the window spanning the central 90% of ratios), e2_effects.{md,csv} (each factor's
paired effect with its 95% CI), e2_claims.md (what the numbers support, written from them),
e2_effects.png (AUC effect ± CI per factor), e2_success_curves.png.

GSPO's window (measured here, calibrated task, 5 seeds × 100 updates): the paper's 3e-4/4e-4 was set for
near on-policy mini-batches; on-policy (staleness 0) it clips nothing, at staleness 4 and 16 it clips
51% and 55% of the model tokens (every sequence whose advantage pushes it further out of the window):
GSPO then learns from the other half. The central 90% of sequence ratios spans ε_lo 0.03 / ε_hi 0.015
at staleness 4 and ε_lo 0.23 / ε_hi 0.002 at staleness 16 (stale data mostly has π < μ): a window of
that size is what GSPO needs under this staleness. E2's factorial does not include GSPO (its ratio is
not a factor level); `--only gspo` re-measures the table.

E1 measures each estimator's bias against g* (the target the cumulative-prefix estimator is exactly
unbiased for; see `estimator_bias_variance`), and also against ∇J.

E2 is a factorial over the three parts TAPO adds to a DAPO-style token loss, every other setting shared
(the loss is `tapo` with DAPO's window ε_lo 0.2 / ε_hi 0.28, token-mean, group-normalised advantages):
  σ (state correction):  none | geo (TAPO) | cum (the cumulative prefix ratio)
  dual clip:             off | on (c = 3, for Â < 0)
  position clip:         off (p = 0: DAPO's window) | on (p = −0.5: the log window shrinks like
                         1/sqrt(position), so late tokens of a long trajectory move least — the
                         "length-aware" intent; p = +0.5 was found effectively unclipped late)
σ none × dual off × position off is DAPO; σ none × dual on is DAPO + dual clip ("grpo+dual" in the
reference run below, which used GRPO's window). All variants of a regime share the seeds, the
pretrained start policies, the task targets and the random numbers the samplers draw, so differences
are paired per seed: a factor's effect is the per-seed mean over the other factors' levels of
(level − baseline level), with a 95% Student t interval over the seeds.

Regimes (calibration, measured on these machines; why each choice):
  calibrated  T=64, staleness 16, Adam lr 0.02, 20-update warmup, 10 seeds, 500 updates. The policy is
              an MLP shared across positions, pretrained to 95% per-token accuracy: learning from a
              uniform policy under 16-update-stale data is clip-limited and crawls for every loss; a
              tabular policy shows no state-shift effect (one position's update moves no other);
              lr 0.05 collapses stale runs before they ever reach their best, and without warmup even
              on-policy runs die early; T=64 is the shortest horizon where the variants separate.
  reference   T=128, staleness 16, lr 0.5, dual clip 3 on both sides: the regime where a reference
              implementation saw the state correction matter with the dual clip on (crashes 7/10 for
              GRPO + dual vs 0/10 for geo-σ + dual); same warmup, seeds and updates.
  on-policy   T=64, staleness 0 (optional sanity regime): every variant must coincide exactly.
Sizes (measured 2026-12-04, one worker, the test suite running on the other core): one job (variant ×
regime, 10 seeds vectorised, 500 updates) takes 10–22 s; the 24 jobs of both regimes took 320 s.
Collapse is measured from each run's own best: `max_drop` (largest fall below the best so far) and
`crash_rate` (share of seeds that fell below half their best so far at some update).
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from itertools import product
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import Progress

from tapo_backend.synthetic import (
    E1_ESTIMATORS,
    StaleReplayConfig,
    estimator_bias_variance,
    paired_effect,
    stale_replay,
    summarize_curves,
)

SIGMAS = ("none", "geo", "cum")
DUAL_CLIP = 3.0
POSITION_EXPONENT = -0.5
SHARED_LOSS = {"clip_low": 0.2, "clip_high": 0.28, "aggregation": "token-mean", "clip_schedule": "position"}


def variant_name(sigma: str, dual: bool, position: bool) -> str:
    return f"σ={sigma} dual={'on' if dual else 'off'} pos={'on' if position else 'off'}"


VARIANTS: dict[str, dict[str, Any]] = {
    variant_name(sigma, dual, position): {
        **SHARED_LOSS,
        "state_correction": sigma,
        "clip_ratio_c": DUAL_CLIP if dual else None,
        "clip_exponent": POSITION_EXPONENT if position else 0.0,
    }
    for sigma, dual, position in product(SIGMAS, (False, True), (False, True))
}
REGIMES: dict[str, dict[str, Any]] = {
    "calibrated": {"horizon": 64, "staleness": 16, "lr": 0.02},
    "reference": {"horizon": 128, "staleness": 16, "lr": 0.5},
    "on-policy": {"horizon": 64, "staleness": 0, "lr": 0.02},
}
QUICK_REGIMES = {
    "calibrated": {"horizon": 8, "staleness": 4, "lr": 0.02},
    "on-policy": {"horizon": 8, "staleness": 0, "lr": 0.02},
}
# contrast label -> (factor, its level, its baseline level, levels the other factors are held at):
# each variant at the level is paired with the one at the baseline whose other factors are equal
FACTORS: dict[str, tuple[str, Any, Any, dict[str, Any]]] = {
    "dual clip (on − off)": ("dual", True, False, {}),
    "position clip (on − off)": ("position", True, False, {}),
    "σ geo − none": ("sigma", "geo", "none", {}),
    "σ cum − none": ("sigma", "cum", "none", {}),
    "σ geo − cum": ("sigma", "geo", "cum", {}),
    # interactions: the state correction where the dual clip is on / off
    "σ geo − none | dual on": ("sigma", "geo", "none", {"dual": True}),
    "σ geo − none | dual off": ("sigma", "geo", "none", {"dual": False}),
    "σ cum − none | dual on": ("sigma", "cum", "none", {"dual": True}),
}
console = Console()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small smoke configuration")
    ap.add_argument("--out", type=Path, default=Path(".recreate/benchmarks/tapo_stability"))
    ap.add_argument("--only", choices=("e1", "e2", "gspo"), help="run one part")
    ap.add_argument("--gspo-updates", type=int, default=100, help="updates per GSPO window measurement")
    ap.add_argument("--regimes", nargs="+", choices=list(REGIMES), help="default: calibrated reference")
    ap.add_argument("--seeds", type=int, help="E2 seeds per regime (default 10)")
    ap.add_argument("--updates", type=int, help="E2 updates per run (default 500)")
    ap.add_argument("--warmup", type=int, default=StaleReplayConfig.warmup)
    ap.add_argument("--workers", type=int, default=2, help="processes (one torch thread each)")
    ap.add_argument("--resume", action="store_true", help="keep finished E2 jobs from results.json")
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite tables and plots from results.json (e.g. of an interrupted sweep)",
    )
    args = ap.parse_args(argv)
    quick = args.quick
    table = QUICK_REGIMES if quick else REGIMES
    names = args.regimes or list(table if quick else ("calibrated", "reference"))
    args.regime_settings = {name: (table.get(name) or REGIMES[name]) for name in names}
    args.seeds = args.seeds or (3 if quick else 10)
    args.updates = args.updates or (15 if quick else 500)
    args.e1_horizons = list(range(1, 7)) if quick else list(range(1, 13))
    args.e1_mismatch = [0.3] if quick else [0.1, 0.3, 0.6]
    args.e1_instances = 2 if quick else 8
    return args


# ----------------------------------------------------------------------------------------------- E1


def run_e1(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for mismatch in args.e1_mismatch:
        for horizon in args.e1_horizons:
            runs = [
                estimator_bias_variance(horizon, mismatch=mismatch, seed=s) for s in range(args.e1_instances)
            ]
            kl = sum(r["_meta"]["kl_mu_pi_per_token"] for r in runs) / len(runs)
            for est in E1_ESTIMATORS:
                row = {"mismatch": mismatch, "kl_per_token": kl, "horizon": horizon, "estimator": est}
                for key in ("rel_bias", "rel_bias_grad_j", "rel_var", "rel_mse_batch", "cosine"):
                    row[key] = sum(r[est][key] for r in runs) / len(runs)
                rows.append(row)
    return rows


def plot_e1(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib.pyplot as plt

    mismatches = sorted({r["mismatch"] for r in rows})
    fig, axes = plt.subplots(3, len(mismatches), figsize=(4.5 * len(mismatches), 10), squeeze=False)
    for col, mismatch in enumerate(mismatches):
        for est in E1_ESTIMATORS:
            sel = [r for r in rows if r["mismatch"] == mismatch and r["estimator"] == est]
            hs = [r["horizon"] for r in sel]
            for row_i, key in enumerate(("rel_bias", "rel_var", "rel_mse_batch")):
                axes[row_i][col].plot(hs, [r[key] for r in sel], marker="o", label=est)
        kl = next(r["kl_per_token"] for r in rows if r["mismatch"] == mismatch)
        axes[0][col].set_title(f"mismatch {mismatch} (KL(μ‖π)/token {kl:.3f})")
        for row_i, label in enumerate(
            ("relative bias ‖E ĝ − g*‖/‖g*‖", "relative variance (1 sample)", "relative MSE, batch 64")
        ):
            axes[row_i][col].set_ylabel(label)
            axes[row_i][col].set_xlabel("horizon H")
            if row_i:
                axes[row_i][col].set_yscale("log")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------- E2
# ----------------------------------------------------------------------------------------------- E2


def e2_job(variant: str, regime: str, settings: dict[str, Any], args_dict: dict[str, Any]) -> dict[str, Any]:
    torch.set_num_threads(1)
    cfg = StaleReplayConfig(
        **settings,
        seeds=args_dict["seeds"],
        updates=args_dict["updates"],
        warmup=args_dict["warmup"],
        loss_config=VARIANTS[variant],
    )
    start = time.perf_counter()
    out = stale_replay("tapo", cfg)
    success = out["success"]
    return {
        "variant": variant,
        "regime": regime,
        "loss_config": VARIANTS[variant],
        "config": {k: v for k, v in asdict(cfg).items() if k != "loss_config"},
        "summary": summarize_curves(success),
        "seconds": time.perf_counter() - start,
        "curves": [[round(float(x), 5) for x in row] for row in success],
        "clip_frac": [round(x, 4) for x in out["clip_frac"]],
        "kl_mu_pi": [round(x, 5) for x in out["kl_mu_pi"]],
    }


def job_key(variant: str, regime: str) -> str:
    return f"{variant}|{regime}"


def run_e2(args: argparse.Namespace, results: dict[str, Any], save) -> None:
    done = results.setdefault("e2", {})
    jobs = [(v, r) for r in args.regime_settings for v in VARIANTS if job_key(v, r) not in done]
    args_dict = {"seeds": args.seeds, "updates": args.updates, "warmup": args.warmup}
    with Progress(console=console) as progress, ProcessPoolExecutor(max_workers=args.workers) as pool:
        task = progress.add_task("E2 factorial", total=len(jobs))
        futures = {pool.submit(e2_job, v, r, args.regime_settings[r], args_dict): (v, r) for v, r in jobs}
        for future in as_completed(futures):
            result = future.result()
            done[job_key(*futures[future])] = result
            save()
            s = result["summary"]
            progress.console.print(
                f"{job_key(*futures[future])}: final {s['final']:.3f} best {s['best']:.3f} "
                f"auc {s['auc']:.3f} drop {s['max_drop']:.3f} crash {s['crash_rate']:.2f} "
                f"({result['seconds']:.0f}s)"
            )
            progress.advance(task)


def e2_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    order = {v: i for i, v in enumerate(VARIANTS)}
    rows = [
        {
            "regime": job["regime"],
            "variant": job["variant"],
            **job["summary"],
            "seeds": job["config"]["seeds"],
        }
        for job in results.get("e2", {}).values()
    ]
    return sorted(rows, key=lambda r: (r["regime"], order.get(r["variant"], 99)))


def _levels(variant: str) -> dict[str, Any]:
    config = VARIANTS[variant]
    return {
        "sigma": config["state_correction"],
        "dual": config["clip_ratio_c"] is not None,
        "position": config["clip_exponent"] != 0.0,
    }


def per_seed(job: dict[str, Any], metric: str) -> torch.Tensor:
    """[S] per-seed value of `metric` (auc, final, crashed) from a job's stored curves."""
    curves = torch.tensor(job["curves"], dtype=torch.float64)
    if metric == "auc":
        return curves.mean(1)
    if metric == "final":
        return curves[:, -1]
    best = torch.cummax(curves, dim=1).values
    return (curves < 0.5 * best).any(1).double()


def factor_effects(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each factor's paired effect on AUC, final success and crash rate, per regime (complete cells only)."""
    rows = []
    jobs = results.get("e2", {})
    for regime in sorted({job["regime"] for job in jobs.values()}):
        cell = {job["variant"]: job for job in jobs.values() if job["regime"] == regime}
        for label, (factor, level, baseline, where) in FACTORS.items():
            pairs = []
            for variant in cell:
                levels = _levels(variant)
                if levels[factor] == level and all(levels[k] == v for k, v in where.items()):
                    other = variant_name(**{**levels, factor: baseline})
                    if other in cell:
                        pairs.append((cell[variant], cell[other]))
            if not pairs:
                continue
            row: dict[str, Any] = {"regime": regime, "factor": label, "pairs": len(pairs)}
            for metric in ("auc", "final", "crashed"):
                on = torch.stack([per_seed(a, metric) for a, _ in pairs]).mean(0)
                off = torch.stack([per_seed(b, metric) for _, b in pairs]).mean(0)
                effect = paired_effect(on, off)
                row[f"{metric}_effect"] = effect["effect"]
                row[f"{metric}_ci_low"] = effect["ci_low"]
                row[f"{metric}_ci_high"] = effect["ci_high"]
            rows.append(row)
    return rows


def claims(effects: list[dict[str, Any]], results: dict[str, Any]) -> str:
    """Plain sentences from the numbers: which factor's AUC interval excludes zero, and which way."""
    lines = ["# E2 factorial: what the numbers support", ""]
    for row in effects:
        low, high = row["auc_ci_low"], row["auc_ci_high"]
        verdict = "raises" if low > 0 else "lowers" if high < 0 else "has no effect distinguishable from 0 on"
        lines.append(
            f"- {row['regime']}: {row['factor']} {verdict} AUC "
            f"({row['auc_effect']:+.3f}, 95% CI [{low:+.3f}, {high:+.3f}]; final {row['final_effect']:+.3f} "
            f"[{row['final_ci_low']:+.3f}, {row['final_ci_high']:+.3f}]; crash rate "
            f"{row['crashed_effect']:+.2f} [{row['crashed_ci_low']:+.2f}, {row['crashed_ci_high']:+.2f}])"
        )
    reference = {j["variant"]: j for j in results.get("e2", {}).values() if j["regime"] == "reference"}
    plain, geo = variant_name("none", True, False), variant_name("geo", True, False)
    if plain in reference and geo in reference:
        crashes = {v: int(per_seed(reference[v], "crashed").sum()) for v in (plain, geo)}
        seeds = len(reference[plain]["curves"])
        agree = crashes[plain] > crashes[geo]
        lines += [
            "",
            "Reference regime (T=128, staleness 16, lr 0.5, dual clip 3 on both): "
            f"crashes {crashes[plain]}/{seeds} for {plain} vs {crashes[geo]}/{seeds} for {geo} "
            "(reference implementation: 7/10 vs 0/10) — "
            + ("ours agrees in direction." if agree else "ours does not reproduce it."),
        ]
    return "\n".join(lines) + "\n"


def k0_sanity(results: dict[str, Any]) -> float | None:
    """Largest difference between any two variants' success curves on-policy (staleness 0)."""
    curves = [
        torch.tensor(j["curves"]) for j in results.get("e2", {}).values() if j["config"]["staleness"] == 0
    ]
    if not curves:
        return None
    stacked = torch.stack(curves)
    return float((stacked.max(0).values - stacked.min(0).values).max())


def plot_e2(results: dict[str, Any], effects: list[dict[str, Any]], out: Path) -> None:
    import matplotlib.pyplot as plt

    jobs = list(results.get("e2", {}).values())
    regimes = sorted({j["regime"] for j in jobs})
    fig, axes = plt.subplots(1, len(regimes), figsize=(6 * len(regimes), 4), squeeze=False, sharey=True)
    for job in sorted(jobs, key=lambda j: list(VARIANTS).index(j["variant"])):
        ax = axes[0][regimes.index(job["regime"])]
        ax.plot(torch.tensor(job["curves"]).mean(0).numpy(), label=job["variant"], lw=1.0)
        ax.set_title(job["regime"])
        ax.set_xlabel("update")
        ax.set_ylabel("success (mean over seeds)")
    axes[0][-1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "e2_success_curves.png", dpi=100)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(regimes), figsize=(6 * len(regimes), 3.2), squeeze=False, sharex=True)
    for col, regime in enumerate(regimes):
        rows = [r for r in effects if r["regime"] == regime]
        ax = axes[0][col]
        ys = range(len(rows))
        effect = [r["auc_effect"] for r in rows]
        err = [
            [r["auc_effect"] - r["auc_ci_low"] for r in rows],
            [r["auc_ci_high"] - r["auc_effect"] for r in rows],
        ]
        ax.errorbar(effect, list(ys), xerr=err, fmt="o", capsize=4)
        ax.axvline(0.0, color="grey", lw=0.8)
        ax.set_yticks(list(ys), [r["factor"] for r in rows], fontsize=8)
        ax.set_xlabel("paired effect on AUC (95% CI over seeds)")
        ax.set_title(regime)
    fig.tight_layout()
    fig.savefig(out / "e2_effects.png", dpi=100)
    plt.close(fig)


# ------------------------------------------------------------------------------------------- GSPO window

GSPO_PAPER_WINDOW = (3e-4, 4e-4)  # ε_lo, ε_hi of Zheng et al. 2025 (near on-policy mini-batches)


def gspo_window(args: argparse.Namespace) -> list[dict[str, Any]]:
    """GSPO's sequence ratio at each staleness, in the calibrated task: how much of the batch the
    paper's window clips, and the window holding the central 90% of sequence ratios (the band a
    window must span for ~10% clipping, the order the GSPO paper reports for its own runs)."""
    rows = []
    settings = QUICK_REGIMES["calibrated"] if args.quick else REGIMES["calibrated"]
    for staleness in (0, 4, 16):
        cfg = StaleReplayConfig(
            **{**settings, "staleness": staleness},
            seeds=args.seeds,
            updates=args.gspo_updates,
            warmup=args.warmup,
            loss_config={"clip_low": GSPO_PAPER_WINDOW[0], "clip_high": GSPO_PAPER_WINDOW[1]},
        )
        out = stale_replay("gspo", cfg)
        late = out["ratio_q05_q95"][len(out["ratio_q05_q95"]) // 2 :]  # after warm-up, once data is stale
        q05 = sorted(q for q, _ in late)[len(late) // 2]
        q95 = sorted(q for _, q in late)[len(late) // 2]
        rows.append(
            {
                "staleness": staleness,
                "paper_window_clip_frac": sum(out["clip_frac"]) / len(out["clip_frac"]),
                "ratio_q05": q05,
                "ratio_q95": q95,
                "window_90pct_eps_low": max(0.0, 1.0 - q05),
                "window_90pct_eps_high": max(0.0, q95 - 1.0),
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------- output


# ---------------------------------------------------------------------------------------------- output


def write_table(rows: list[dict[str, Any]], stem: Path) -> None:
    if not rows:
        return
    keys = list(rows[0])
    with stem.with_suffix(".csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)

    def cell(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(cell(r[k]) for k in keys) + " |" for r in rows]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.json"
    results: dict[str, Any] = {}
    if (args.resume or args.report_only) and results_path.exists():
        results = json.loads(results_path.read_text())
    if not args.report_only:
        results["settings"] = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}

    def save() -> None:
        results_path.write_text(json.dumps(results))

    if not args.report_only and args.only in (None, "e1"):
        with console.status("E1 exact enumeration"):
            results["e1"] = run_e1(args)
        save()
    if not args.report_only and args.only in (None, "gspo"):
        with console.status("GSPO window per staleness"):
            results["gspo_window"] = gspo_window(args)
        save()
    if not args.report_only and args.only in (None, "e2"):
        run_e2(args, results, save)
    write_report(results, args.out)
    save()
    console.print(f"wrote {args.out}")
    return results


def write_report(results: dict[str, Any], out: Path) -> None:
    if results.get("gspo_window"):
        write_table(results["gspo_window"], out / "gspo_window")
    if results.get("e1"):
        write_table(results["e1"], out / "e1_table")
        plot_e1(results["e1"], out / "e1_bias_variance.png")
    if results.get("e2"):
        results["e2_k0_max_curve_diff"] = k0_sanity(results)
        effects = factor_effects(results)
        results["e2_effects"] = effects
        write_table(e2_rows(results), out / "e2_table")
        write_table(effects, out / "e2_effects")
        text = claims(effects, results)
        (out / "e2_claims.md").write_text(text)
        plot_e2(results, effects, out)
        console.print(text, soft_wrap=True)


if __name__ == "__main__":
    main()
