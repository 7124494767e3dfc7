"""Closed-loop RL on the embedded SmolLM2-135M: a factorial of policy losses, seeds, intervals, staleness.

The agent (real runtime: text actions in a bwrap sandbox, 2 steps; the math domain checks the submitted
number) answers three-term sums worded "What is the sum of 40, 85 and 79?". The seed scaffold shows two
worked examples in another form ("What is 3 + 4?" answered by `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT;
echo $((3 + 4))`); the model must carry the pattern over to the task's wording.

Task family and base rate (`--wording`). Base pass@1 with this scaffold (24 tasks × 2 eval seeds, T=0.7,
2026-12-06, 2 loaded cores): "sum-of" 0.146 [0.062, 0.229] on a probe set, 0.208 [0.083, 0.333] on the
benchmark's own held-out set; "plus" 0.542, "total" 0.125 on the probe set. "sum-of" was chosen as the
higher of the wordings inside 10-40% (room for RL to learn and for variants to separate; groups need
mixed rewards); docs/benchmarks/closed_loop.md has the table. Iteration 0 of every run is that one base
evaluation (same model, tasks and eval seeds), so paired differences there are 0.

Variants (`--variants`), a factorial: each differs from the previous one in one loss setting; all are
trained through the loss registry with every setting spelled out (benchmarks/closed_loop_tasks.py):
  grpo       ε 0.2/0.2, per-sequence mean, no dual clip, no state correction
  dapo       grpo + clip-higher (ε_hi 0.28) + token mean
  dapo+dual  dapo + dual clip (c = 3)
  tapo       dapo+dual + geometric state correction (the registry's `tapo`: its position clip is off, p = 0)
  tapo+pos   tapo + position clip (p = -0.5)
and, outside the chain (the default runs the five above), a setting without the ones before it:
  grpo+geo   grpo + geometric state correction (`--variants grpo,grpo+geo` pairs it with grpo)
Everything else (tasks, seeds, sampling, LoRA, steps, batch, held-out set) is shared and printed.

Learning rate (`--sweep-lrs`, `--sweep-iterations`, `--sweep-seed`): per variant, a short run at each rate
on the training tasks only, from a loop seed outside the compared ones; the rate with the highest mean
training reward of the rollouts sampled after the first update (iterations 2..N) is that variant's rate.
The held-out tasks are never run in the sweep. `--lr X` skips the sweep (one rate for all, stated).

Seeds and intervals (`--seeds N`: loop seeds 0..N-1; use ≥ 3): a loop seed sets the training task order,
the rollout sampling seeds and the trainer's seed. Per iteration: held-out pass@1 per variant, and the
paired difference of adjacent variants (and last − first) per iteration and on the AUC (mean pass@1 over
iterations 1..N), each with a 95% interval from a bootstrap over loop seeds and held-out tasks.

Staleness (`--staleness 0,4,16`, `--staleness-variants grpo,tapo`): at k > 0 the loop is a pipeline k
deep: the rollouts trained at iteration i (the same tasks and seeds as the on-policy run's iteration i)
are sampled at iteration i − k, by the policy k versions back; the first iteration samples those of
iterations 1..k + 1 with the base policy, so every iteration trains and the staleness rises 0, 1, .., k;
a lag-k run has `--iterations` + k iterations, `--iterations` of them at staleness k. Each row's
`staleness` is the versions actually behind (an iteration with nothing to learn publishes none); each
variant's summary says the most its runs reached (`staleness_reached`).
Per k and variant: AUC with its interval, collapse rate (share of seeds whose held-out pass@1, after
rising, fell below half its best so far and below the base) and divergence (a non-finite loss).

Outputs under `--results` (default docs/benchmarks): closed_loop.json (settings, sweep, per-run rows,
curves, paired differences, staleness) and closed_loop.png; runs/ holds a record of each finished held-out
run (settings, rows, per-task scores: benchmarks/closed_loop_ledger.py). A run already recorded there with
the same settings is taken from its record, not run again, so a table can be filled over several sittings:
`--run-seeds 2` runs only seed 2 now and summarizes the seeds that every variant has recorded (listed under
"seeds"). Run folders (resumable mid-run) live under `--out`.

Full run (about 14 h on a quiet 2-core machine; docs/benchmarks/closed_loop.md):
    flock /tmp/recreate-heavy.lock .venv/bin/python benchmarks/closed_loop.py --out .recreate/closed-loop
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import closed_loop_ledger as ledger  # noqa: E402
from benchmarks import closed_loop_stats as stats  # noqa: E402
from benchmarks.closed_loop_sweep import sweep, write_sweeps  # noqa: E402
from benchmarks.closed_loop_tasks import (  # noqa: E402
    ALL_CHANGES,
    ALL_VARIANTS,
    TRAIN_ALGO,
    VARIANTS,
    WORDINGS,
    parse_variants,
    scaffold,
    write_tasks,
)

SWEEP_LRS = "3e-5,1e-4,3e-4,1e-3,3e-3"  # widened twice: a pick on the grid's edge (3e-4, then DAPO's 1e-3)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated, from: " + ", ".join(ALL_VARIANTS)
    )
    ap.add_argument("--seeds", type=int, default=3, help="loop seeds per variant (0..N-1)")
    ap.add_argument(
        "--run-seeds", default=None, help="run only these seeds now (the rest come from recorded runs)"
    )
    ap.add_argument("--iterations", type=int, default=6, help="iterations per run (k more at lag k)")
    ap.add_argument("--lr", type=float, default=None, help="one rate for every variant (skips the sweep)")
    ap.add_argument("--sweep-lrs", default=SWEEP_LRS, help="rates the per-variant sweep tries")
    ap.add_argument("--sweep-iterations", type=int, default=3, help="iterations of each sweep run (>= 2)")
    ap.add_argument(
        "--sweep-seed", type=int, default=1000, help="loop seed of the sweep (not a compared one)"
    )
    ap.add_argument(
        "--sweep-only", action="store_true", help="run the sweeps of --variants, write sweep.json, stop"
    )
    ap.add_argument("--staleness", default="0,4,16", help="lags k (policy versions) to run; 0 = on-policy")
    ap.add_argument("--staleness-variants", default="grpo,tapo", help="variants run at k > 0")
    ap.add_argument("--wording", default="sum-of", choices=tuple(WORDINGS))
    ap.add_argument("--train-tasks", type=int, default=64)
    ap.add_argument("--val-tasks", type=int, default=24)
    ap.add_argument("--tasks-per-iteration", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4, help="optimizer steps per iteration")
    ap.add_argument("--eval-seeds", type=int, default=2)
    ap.add_argument("--reply-tokens", type=int, default=64, help="cap per model reply")
    ap.add_argument("--home", type=Path, default=REPO / ".recreate", help="RECREATE_HOME (the HF conversion)")
    ap.add_argument("--out", type=Path, default=REPO / ".recreate" / "closed-loop", help="runs (resumable)")
    ap.add_argument("--results", type=Path, default=REPO / "docs" / "benchmarks", help="JSON + plot folder")
    args = ap.parse_args(argv)
    args.variants = parse_variants(args.variants)
    args.staleness_variants = parse_variants(args.staleness_variants)
    args.staleness = _ints("--staleness", args.staleness)
    args.run_seeds = None if args.run_seeds is None else _ints("--run-seeds", args.run_seeds)
    args.sweep_lrs = sorted(_floats("--sweep-lrs", args.sweep_lrs))
    least = {
        "seeds": 1,
        "iterations": 1,
        "sweep_iterations": 2,
        "val_tasks": 1,
        "train_tasks": 1,
        "group_size": 2,
    }
    for key, minimum in least.items():
        if getattr(args, key) < minimum:
            ap.error(f"--{key.replace('_', '-')} must be at least {minimum}, got {getattr(args, key)}")
    return args


def _ints(flag: str, text: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise SystemExit(f"{flag}: expected comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < 0:
        raise SystemExit(f"{flag}: expected whole numbers >= 0, got {text!r}")
    return values


def _floats(flag: str, text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"{flag}: expected comma-separated numbers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise SystemExit(f"{flag}: expected positive learning rates, got {text!r}")
    return values


class Bench:
    """The shared tasks, scaffold and settings; runs one online-training loop at a time."""

    def __init__(self, args: argparse.Namespace):
        from recreate.domains import get_domain

        self.args, self.out = args, args.out
        self.out.mkdir(parents=True, exist_ok=True)
        held_out = write_tasks(self.out / "val.jsonl", args.val_tasks, 1, args.wording)
        write_tasks(self.out / "train.jsonl", args.train_tasks, 0, args.wording, exclude=held_out)
        self.val = get_domain("math", data=self.out / "val.jsonl")
        self.train = get_domain("math", data=self.out / "train.jsonl")
        self.val_ids = sorted(t.id for t in self.val.tasks("all"))
        self.scaffold = scaffold()

    def config(self, variant: str, lr: float, seed: int, iterations: int, lag: int = 0) -> Any:
        from recreate.finetune.online import OnlineConfig

        a = self.args
        return OnlineConfig(
            iterations=iterations, tasks_per_iteration=a.tasks_per_iteration, group_size=a.group_size,
            lag=lag, algo=TRAIN_ALGO, loss=dict(ALL_VARIANTS[variant]), lr=lr, steps_per_iteration=a.steps,
            eval_seeds=a.eval_seeds, seed=seed, max_reply_tokens=a.reply_tokens,
        )  # fmt: skip

    def loop(self, run_dir: Path, config: Any, *, held_out: bool) -> dict[str, Any]:
        """One online-training run (resumed if its folder has rows); a non-finite loss ends it as diverged."""
        from recreate.finetune.online import online_train

        if held_out:
            self._seed_base(run_dir)
        diverged = None
        try:
            online_train(
                scaffold=self.scaffold, domain=self.train, train_tasks=self.train.tasks("all"),
                val_tasks=self.val.tasks("all") if held_out else [], run_dir=run_dir, home=self.args.home,
                config=config,
            )  # fmt: skip
        except FloatingPointError as exc:
            diverged = str(exc)
            print(f"{run_dir.name}: diverged: {exc}")
        return {"rows": metrics_rows(run_dir), "diverged": diverged}

    def base(self) -> Path:
        """The base model's held-out evaluation (iteration 0), run once and shared by every run."""
        from recreate.finetune.online import online_train

        base_dir = self.out / "base"
        if not (base_dir / "metrics.jsonl").is_file():
            online_train(
                scaffold=self.scaffold, domain=self.val, train_tasks=[], val_tasks=self.val.tasks("all"),
                run_dir=base_dir, home=self.args.home, config=self.config("grpo", 1e-4, 0, iterations=0),
            )  # fmt: skip
        return base_dir

    def _seed_base(self, run_dir: Path) -> None:
        if (run_dir / "metrics.jsonl").is_file():
            return
        base_dir = self.base()
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(base_dir / "eval" / "it-000", run_dir / "eval" / "it-000", dirs_exist_ok=True)
        shutil.copy(base_dir / "metrics.jsonl", run_dir / "metrics.jsonl")

    def scores(self, run_dir: Path, iterations: int) -> tuple[np.ndarray, int | None]:
        """`[iteration, task]` held-out pass@1 of a run (padded past an early stop), where padding began.
        An iteration that published no version was measured by an earlier one's runs (`val_from`)."""
        rows = []
        for row in metrics_rows(run_dir):
            measured = row["iteration"] if row.get("val_from") is None else row["val_from"]
            rows.append(self._task_scores(run_dir / "eval" / f"it-{measured:03d}"))
        padded, start = stats.pad_curve(rows, iterations)
        return np.array(padded), start

    def _task_scores(self, folder: Path) -> list[float]:
        runs: dict[str, list[float]] = {}
        for file in folder.glob("*.json"):
            row = json.loads(file.read_text(encoding="utf-8"))
            passed = bool((row.get("evaluation") or {}).get("passed"))
            runs.setdefault(row["task_id"], []).append(float(passed))
        return [sum(runs.get(t, [0.0])) / len(runs.get(t, [0.0])) for t in self.val_ids]


def metrics_rows(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def run_all(bench: Bench) -> dict[str, Any]:
    args = bench.args
    variants = list(
        dict.fromkeys([*args.variants, *(args.staleness_variants if max(args.staleness) else [])])
    )
    lrs = {v: args.lr for v in variants} if args.lr else {}
    sweeps = {}
    for variant in variants if not args.lr else []:
        sweeps[variant] = sweep(bench, variant)
        lrs[variant] = sweeps[variant]["chosen"]
    results: dict[str, Any] = {"sweep": sweeps, "lr": lrs, "staleness": {}, "runs": {}, "seeds": {}}
    for lag in args.staleness:
        names = args.variants if lag == 0 else args.staleness_variants
        done: dict[str, dict[int, dict[str, Any]]] = {name: {} for name in names}
        for seed in range(args.seeds):  # seed by seed: a pair of variants is comparable as soon as it ends
            for variant in names:
                record = held_out_run(bench, variant, lrs[variant], seed, lag)
                if record is not None:
                    done[variant][seed] = record
        seeds = sorted(set.intersection(*(set(d) for d in done.values())))
        results["seeds"][f"k{lag}"] = seeds
        if not seeds:
            print(f"k{lag}: no seed has finished runs of every variant yet; nothing to summarize")
            continue
        for variant in names:
            results["runs"][f"k{lag}/{variant}"] = [ledger.without_scores(done[variant][s]) for s in seeds]
        grids = {v: np.array([done[v][s]["scores"] for s in seeds], dtype=float) for v in names}
        results["staleness"][f"k{lag}"] = stats.summarize(grids, results["runs"], lag)
    return results


def held_out_run(bench: Bench, variant: str, lr: float, seed: int, lag: int) -> dict[str, Any] | None:
    """One run's record: from the records under --results, else run now (unless --run-seeds leaves it)."""
    args = bench.args
    iterations = args.iterations + lag  # the staleness rises to k over the first k + 1
    settings = ledger.run_settings(args, variant, lr, seed, iterations, lag)
    file = ledger.record_path(args.results, lag, variant, lr, seed)
    record = ledger.load(file, settings, bench.val_ids)
    if record is not None:
        print(f"k{lag} {variant} seed {seed}: recorded in {file}")
        return record
    if args.run_seeds is not None and seed not in args.run_seeds:
        return None
    # the rate names the folder too: a later run at another rate is another run
    run_dir = bench.out / f"k{lag}" / f"{variant}-lr{lr:g}" / f"seed-{seed}"
    started = time.time()
    run = bench.loop(run_dir, bench.config(variant, lr, seed, iterations, lag), held_out=True)
    scores, padded_from = bench.scores(run_dir, iterations)
    run.update(seed=seed, padded_from=padded_from, wall_min=round((time.time() - started) / 60, 1))
    run.update(stats.collapse(list(scores.mean(axis=1)), float(scores[0].mean())))
    record = {
        "settings": settings, "date": time.strftime("%Y-%m-%d"), **run, "val_ids": bench.val_ids,
        "scores": scores.tolist(),
    }  # fmt: skip
    ledger.save(file, record)
    return record


def report(args: argparse.Namespace, results: dict[str, Any], shared: dict[str, Any], base: float) -> None:
    for key, block in results["staleness"].items():
        print(f"\n== {key} ==  held-out pass@1 per iteration [95% CI over loop seeds × tasks]")
        for name, v in block["variants"].items():
            curve = "  ".join(f"{r['pass_at_1']:.3f}[{r['ci'][0]:.2f},{r['ci'][1]:.2f}]" for r in v["curve"])
            print(f"{name:10} lr {results['lr'][name]:g}  {curve}")
            print(f"{'':10} AUC {v['auc']:.3f} [{v['ci'][0]:.3f}, {v['ci'][1]:.3f}]  collapse "
                  f"{v['collapse_rate']:.2f}  diverged {v['divergence_rate']:.2f}")  # fmt: skip
        for label, d in block["differences"].items():
            per = "  ".join(
                f"{r['difference']:+.3f}[{r['ci'][0]:+.2f},{r['ci'][1]:+.2f}]" for r in d["per_iteration"]
            )
            auc, (low, high) = d["auc"]["difference"], d["auc"]["ci"]
            print(f"{label:22} {per}\n{'':22} AUC {auc:+.3f} [{low:+.3f}, {high:+.3f}]")
    document = {
        "benchmark": "benchmarks/closed_loop.py",
        "date": time.strftime("%Y-%m-%d"),
        "settings": shared,
        "task_family": {"wording": WORDINGS[args.wording], "base_pass_at_1": base},
        "variants": {n: {"change": ALL_CHANGES[n], "loss": ALL_VARIANTS[n]} for n in ALL_VARIANTS},
        "train_algo": TRAIN_ALGO,
        **results,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "closed_loop.json").write_text(
        json.dumps(document, indent=1, default=str), encoding="utf-8"
    )
    if not results["staleness"]:
        print(f"\nno summary yet: finished runs are recorded under {args.results}/runs")
        return
    key = next(iter(results["staleness"]))  # the smallest lag with a summary
    main_block = results["staleness"][key]
    curves = {n: v["curve"] for n, v in main_block["variants"].items()}
    seeds = results["seeds"][key]
    title = f"SmolLM2-135M, '{args.wording}' sums, {key}, seed(s) {', '.join(map(str, seeds))}"
    stats.plot(curves, main_block["differences"], title, args.results / "closed_loop.png")
    print(f"\nresults and plot: {args.results}/closed_loop.{{json,png}}  runs: {args.out}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    shared = {k: v for k, v in vars(args).items() if k not in ("home", "out", "results")}
    print("shared settings:", json.dumps(shared, default=str))
    for name in args.variants:
        print(f"  {name:10} {ALL_CHANGES[name]:70} {json.dumps(ALL_VARIANTS[name])}")
    bench = Bench(args)
    if args.sweep_only:
        write_sweeps(bench, shared)
        return
    base_dir = bench.base()
    base = float(np.mean(bench.scores(base_dir, 0)[0][0]))
    print(f"base pass@1 of '{WORDINGS[args.wording]}': {base:.3f} over {len(bench.val_ids)} held-out tasks")
    report(args, run_all(bench), shared, base)


if __name__ == "__main__":
    main()
