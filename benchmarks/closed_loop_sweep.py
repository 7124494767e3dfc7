"""The learning-rate sweep of the closed-loop benchmark: per variant, short runs on the training tasks only.

The signal is the mean training reward of the rollouts sampled after the first update; the held-out tasks
are never run here (benchmarks/closed_loop.py's docstring states the procedure).
"""

from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.closed_loop import Bench


def sweep_signal(rows: list[dict[str, Any]], diverged: str | None) -> float:
    """Mean training reward of the rollouts sampled after the first update (iterations >= 2)."""
    rewards = [r["reward_mean"] for r in rows if r["iteration"] >= 2 and r["reward_mean"] is not None]
    return float("-inf") if diverged or not rewards else sum(rewards) / len(rewards)


def choose_lr(signals: dict[float, float]) -> float:
    """The rate with the highest signal; ties go to the lowest rate."""
    return max(sorted(signals), key=lambda lr: (signals[lr], -lr))


def sweep(bench: Bench, variant: str) -> dict[str, Any]:
    args = bench.args
    signals = {}
    for lr in args.sweep_lrs:
        config = bench.config(variant, lr, args.sweep_seed, iterations=args.sweep_iterations)
        run = bench.loop(bench.out / "sweep" / variant / f"lr-{lr:g}", config, held_out=False)
        signals[lr] = sweep_signal(run["rows"], run["diverged"])
        print(f"sweep {variant} lr {lr:g}: training reward after updates {signals[lr]:.3f}")
    chosen = choose_lr(signals)
    if not math.isfinite(signals[chosen]):
        print(f"sweep {variant}: every rate diverged or learned nothing to measure; the lowest is used")
    return {  # a rate without a finite signal (diverged, or no batch after an update) is null
        "signals": {f"{lr:g}": (s if math.isfinite(s) else None) for lr, s in signals.items()},
        "chosen": chosen,
        "chosen_by_default": not math.isfinite(signals[chosen]),
    }


def write_sweeps(bench: Bench, shared: dict[str, Any]) -> None:
    """The sweep phase alone (it takes hours). A later run without --lr in the same --out (same settings)
    finds these sweep runs done and chooses the same rates from them."""
    args = bench.args
    sweeps = {variant: sweep(bench, variant) for variant in args.variants}
    document = {"benchmark": "benchmarks/closed_loop.py --sweep-only", "date": time.strftime("%Y-%m-%d"),
                "settings": shared, "sweep": sweeps}  # fmt: skip
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "sweep.json").write_text(json.dumps(document, indent=1, default=str), encoding="utf-8")
    chosen = {variant: block["chosen"] for variant, block in sweeps.items()}
    print(f"sweep: chosen rates {json.dumps(chosen)}  ({args.results}/sweep.json)")
