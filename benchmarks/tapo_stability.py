"""TAPO stability experiments E1 and E2 (see tapo_backend/synthetic.py), CPU only.

    python benchmarks/tapo_stability.py            # full sweep (E1 + E2: T x staleness x losses x seeds)
    python benchmarks/tapo_stability.py --quick    # small smoke configuration, seconds
    python benchmarks/tapo_stability.py --only e2 --horizons 64 128 --staleness 16 --workers 2

Writes under --out (default .recreate/benchmarks/tapo_stability): results.json (updated after every
finished E2 job, so `--resume` continues an interrupted sweep and `--report-only` tabulates it),
e1_table.{md,csv}, e2_table.{md,csv}, e1_bias_variance.png, e2_success_curves.png, e2_crash_rate.png.

E2 regime (calibrated on these machines; each choice was needed for the effect to show): the policy is
an MLP shared across positions and pretrained to 95% per-token accuracy (learning from a uniform
policy under 16-update-stale data is clip-limited and crawls for every loss); Adam lr 0.02 with a
20-update linear warmup (lr 0.05 collapses stale GRPO before it ever reaches 0.9, and slows even
on-policy GRPO); 500 updates, one optimizer step per batch of 8 tasks x 8 rollouts; success is the
exact expected survival fraction; crash = success < 0.5 after first reaching 0.9.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import Progress

from tapo_backend.synthetic import (
    E1_ESTIMATORS,
    StaleReplayConfig,
    estimator_bias_variance,
    stale_replay,
    summarize_curves,
)

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo": ("grpo", {}),
    "grpo+dual": ("grpo", {"clip_ratio_c": 3.0}),
    "dapo": ("dapo", {}),
    "gspo": ("gspo", {}),
    "ctpo": ("ctpo", {}),
    "tapo p=0": ("tapo", {"clip_exponent": 0.0}),
    "tapo p=-0.5": ("tapo", {"clip_exponent": -0.5}),
    "tapo p=+0.5": ("tapo", {"clip_exponent": 0.5}),
}
console = Console()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small smoke configuration")
    ap.add_argument("--out", type=Path, default=Path(".recreate/benchmarks/tapo_stability"))
    ap.add_argument("--only", choices=("e1", "e2"), help="run one experiment")
    ap.add_argument("--horizons", type=int, nargs="+", help="E2 horizons T (default 32 64 128)")
    ap.add_argument("--staleness", type=int, nargs="+", help="E2 staleness k (default 0 4 16)")
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS), help="E2 losses (default all)")
    ap.add_argument("--seeds", type=int, help="E2 seeds per cell (default 10)")
    ap.add_argument("--updates", type=int, help="E2 updates per run (default 500)")
    ap.add_argument("--lr", type=float, default=StaleReplayConfig.lr)
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
    # Jobs run in this order (most informative first), so an interrupted sweep keeps the key cells.
    args.horizons = args.horizons or ([8, 16] if quick else [128, 64, 32])
    args.staleness = args.staleness or ([0, 4] if quick else [16, 0, 4])
    args.variants = args.variants or list(VARIANTS)
    args.seeds = args.seeds or (2 if quick else 10)
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
                for key in ("rel_bias", "rel_var", "rel_mse_batch", "cosine"):
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
            ("relative bias ‖E ĝ − ∇J‖/‖∇J‖", "relative variance (1 sample)", "relative MSE, batch 64")
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


def e2_job(variant: str, horizon: int, staleness: int, args_dict: dict[str, Any]) -> dict[str, Any]:
    torch.set_num_threads(1)
    loss_name, loss_config = VARIANTS[variant]
    cfg = StaleReplayConfig(
        horizon=horizon,
        staleness=staleness,
        seeds=args_dict["seeds"],
        updates=args_dict["updates"],
        lr=args_dict["lr"],
        warmup=args_dict["warmup"],
        loss_config=loss_config,
    )
    start = time.perf_counter()
    out = stale_replay(loss_name, cfg)
    success = out["success"]
    return {
        "variant": variant,
        "loss": loss_name,
        "loss_config": loss_config,
        "horizon": horizon,
        "staleness": staleness,
        "config": {k: v for k, v in asdict(cfg).items() if k != "loss_config"},
        "summary": summarize_curves(success),
        "seconds": time.perf_counter() - start,
        "curves": [[round(float(x), 5) for x in row] for row in success],
        "clip_frac": [round(x, 4) for x in out["clip_frac"]],
        "kl_mu_pi": [round(x, 5) for x in out["kl_mu_pi"]],
    }


def job_key(variant: str, horizon: int, staleness: int) -> str:
    return f"{variant}|T={horizon}|k={staleness}"


def run_e2(args: argparse.Namespace, results: dict[str, Any], save) -> None:
    done = results.setdefault("e2", {})
    jobs = [
        (v, h, k)
        for k in args.staleness
        for h in args.horizons
        for v in args.variants
        if job_key(v, h, k) not in done
    ]
    args_dict = {"seeds": args.seeds, "updates": args.updates, "lr": args.lr, "warmup": args.warmup}
    with Progress(console=console) as progress, ProcessPoolExecutor(max_workers=args.workers) as pool:
        task = progress.add_task("E2 stale replay", total=len(jobs))
        futures = {pool.submit(e2_job, v, h, k, args_dict): (v, h, k) for v, h, k in jobs}
        for future in as_completed(futures):
            result = future.result()
            done[job_key(*futures[future])] = result
            save()
            s = result["summary"]
            progress.console.print(
                f"{job_key(*futures[future])}: final {s['final']:.3f} best {s['best']:.3f} "
                f"auc {s['auc']:.3f} crash {s['crash_rate']:.2f} ({result['seconds']:.0f}s)"
            )
            progress.advance(task)


def e2_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for job in results.get("e2", {}).values():
        rows.append(
            {
                "T": job["horizon"],
                "k": job["staleness"],
                "variant": job["variant"],
                **job["summary"],
                "seeds": job["config"]["seeds"],
                "updates": job["config"]["updates"],
            }
        )
    order = {v: i for i, v in enumerate(VARIANTS)}
    return sorted(rows, key=lambda r: (r["T"], r["k"], order.get(r["variant"], 99)))


def k0_sanity(results: dict[str, Any]) -> dict[str, float]:
    """Per horizon: largest difference between any two losses' success curves at staleness 0."""
    out = {}
    by_t: dict[int, list[torch.Tensor]] = {}
    for job in results.get("e2", {}).values():
        if job["staleness"] == 0:
            by_t.setdefault(job["horizon"], []).append(torch.tensor(job["curves"]))
    for horizon, curves in by_t.items():
        stacked = torch.stack(curves)
        out[str(horizon)] = float((stacked.max(0).values - stacked.min(0).values).max())
    return out


def plot_e2(results: dict[str, Any], out: Path) -> None:
    import matplotlib.pyplot as plt

    jobs = list(results.get("e2", {}).values())
    horizons = sorted({j["horizon"] for j in jobs})
    stales = sorted({j["staleness"] for j in jobs})
    fig, axes = plt.subplots(
        len(horizons), len(stales), figsize=(5 * len(stales), 3.6 * len(horizons)), squeeze=False, sharey=True
    )
    for job in sorted(jobs, key=lambda j: list(VARIANTS).index(j["variant"])):
        ax = axes[horizons.index(job["horizon"])][stales.index(job["staleness"])]
        curves = torch.tensor(job["curves"])
        ax.plot(curves.mean(0).numpy(), label=job["variant"], lw=1.2)
        ax.set_title(f"T={job['horizon']}, staleness k={job['staleness']}")
        ax.set_xlabel("update")
        ax.set_ylabel("success (mean over seeds)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "e2_success_curves.png", dpi=100)
    plt.close(fig)

    rows = e2_rows(results)
    variants = [v for v in VARIANTS if any(r["variant"] == v for r in rows)]
    cells = sorted({(r["T"], r["k"]) for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.45 * len(variants) + 2))
    for ax, key in zip(axes, ("crash_rate", "final"), strict=True):
        grid = [
            [
                next((r[key] for r in rows if r["variant"] == v and (r["T"], r["k"]) == c), math.nan)
                for c in cells
            ]
            for v in variants
        ]
        im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis" if key == "final" else "magma_r", aspect="auto")
        ax.set_xticks(range(len(cells)), [f"T{t}\nk{k}" for t, k in cells], fontsize=7)
        ax.set_yticks(range(len(variants)), variants)
        for i, line in enumerate(grid):
            for j, value in enumerate(line):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6, color="w")
        ax.set_title(key)
        fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(out / "e2_crash_rate.png", dpi=100)
    plt.close(fig)


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

    if args.report_only:
        write_report(results, args.out)
        save()
        return results
    if args.only in (None, "e1"):
        with console.status("E1 exact enumeration"):
            results["e1"] = run_e1(args)
        write_table(results["e1"], args.out / "e1_table")
        plot_e1(results["e1"], args.out / "e1_bias_variance.png")
        save()
    if args.only in (None, "e2"):
        run_e2(args, results, save)
        write_report(results, args.out)
        save()
    console.print(f"wrote {args.out}")
    return results


def write_report(results: dict[str, Any], out: Path) -> None:
    if results.get("e1"):
        write_table(results["e1"], out / "e1_table")
        plot_e1(results["e1"], out / "e1_bias_variance.png")
    if results.get("e2"):
        results["e2_k0_max_curve_diff"] = k0_sanity(results)
        write_table(e2_rows(results), out / "e2_table")
        plot_e2(results, out)
        console.print(
            f"k=0 sanity (max |curve difference| between losses): {results['e2_k0_max_curve_diff']}"
        )


if __name__ == "__main__":
    main()
