"""Statistics and the plot of the closed-loop benchmark (pure functions over held-out scores).

A run's scores are a matrix `[iteration, task]` of held-out pass@1 (mean over the eval seeds). A
variant's runs (one per loop seed) stack into `[seed, iteration, task]`. Runs of every variant share
the held-out tasks, the eval seeds and, per loop seed, the training task order and sampling seeds, so
two variants are compared *paired* by (loop seed, task).

Intervals come from a crossed bootstrap: loop seeds and held-out tasks are resampled independently
(with replacement) and the statistic recomputed on the resampled grid, so the interval covers both the
variation between training runs and the finite held-out set. With 3 seeds the seed half of that
interval is coarse: it is reported as it is, never narrowed by treating tasks as the only noise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

CONFIDENCE = 0.95


def crossed_bootstrap(
    grid: np.ndarray, *, iterations: int = 4000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of a `[seed, task]` grid with its percentile interval, seeds and tasks resampled apart."""
    grid = np.asarray(grid, dtype=float)
    if grid.ndim != 2 or grid.size == 0:
        raise ValueError(f"need a non-empty [seed, task] grid, got shape {grid.shape}")
    rng = np.random.default_rng(seed)
    seeds, tasks = grid.shape
    rows = rng.integers(0, seeds, size=(iterations, seeds))
    cols = rng.integers(0, tasks, size=(iterations, tasks))
    # mean over the resampled grid = mean over resampled rows of (row means over resampled columns)
    col_counts = np.zeros((iterations, tasks))
    np.add.at(col_counts, (np.arange(iterations)[:, None], cols), 1.0)
    row_means = col_counts @ grid.T / tasks  # [iterations, seeds]
    means = np.take_along_axis(row_means, rows, axis=1).mean(axis=1)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(grid.mean()), float(low), float(high)


def auc(scores: np.ndarray) -> np.ndarray:
    """Area under the held-out curve per (seed, task) of `[seed, iteration, task]`: the mean pass@1 over
    the trained iterations 1..N (iteration 0, the shared base model, is left out)."""
    if scores.shape[1] < 2:
        raise ValueError("the area under the curve needs at least one trained iteration")
    return scores[:, 1:, :].mean(axis=1)


def summarize_variant(scores: np.ndarray) -> list[dict[str, Any]]:
    """Per iteration: mean held-out pass@1 over seeds and tasks with its crossed-bootstrap interval."""
    rows = []
    for iteration in range(scores.shape[1]):
        mean, low, high = crossed_bootstrap(scores[:, iteration, :])
        rows.append({"iteration": iteration, "pass_at_1": mean, "ci": [low, high]})
    return rows


def paired_difference(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """a − b per iteration and on the AUC, paired by (seed, task), each with its interval."""
    if a.shape != b.shape:
        raise ValueError(
            f"paired variants need the same [seed, iteration, task] shape: {a.shape} vs {b.shape}"
        )
    per_iteration = []
    for iteration in range(a.shape[1]):
        mean, low, high = crossed_bootstrap(a[:, iteration, :] - b[:, iteration, :])
        per_iteration.append({"iteration": iteration, "difference": mean, "ci": [low, high]})
    mean, low, high = crossed_bootstrap(auc(a) - auc(b))
    return {"per_iteration": per_iteration, "auc": {"difference": mean, "ci": [low, high]}}


def auc_summary(scores: np.ndarray) -> dict[str, Any]:
    mean, low, high = crossed_bootstrap(auc(scores))
    return {"auc": mean, "ci": [low, high]}


def collapse(curve: list[float], base: float) -> dict[str, Any]:
    """Collapse of one run's held-out curve (iteration 0 = base): `max_drop` is the largest fall below
    its best so far; `collapsed` is true when, after rising, it fell below both half its best so far and
    the base model's score (it lost what it learned and more)."""
    best, max_drop, collapsed = curve[0], 0.0, False
    for value in curve[1:]:
        best = max(best, value)
        max_drop = max(max_drop, best - value)
        collapsed = collapsed or (best > base and value < min(best / 2, base))
    return {"max_drop": float(max_drop), "collapsed": bool(collapsed)}  # plain types: they go to JSON


def summarize(grids: dict[str, np.ndarray], runs: dict[str, list[dict]], lag: int) -> dict[str, Any]:
    """Per variant at lag k: curve, AUC, collapse and divergence rates; paired differences of neighbours
    (and last − first when more than two)."""
    names = list(grids)
    pairs = [(b, a) for a, b in zip(names, names[1:], strict=False)]
    if len(names) > 2:
        pairs.append((names[-1], names[0]))
    per_variant = {}
    for name, grid in grids.items():
        own = runs[f"k{lag}/{name}"]
        behind = [row.get("staleness") or 0.0 for run in own for row in run["rows"]]
        per_variant[name] = {
            "curve": summarize_variant(grid),
            **auc_summary(grid),
            "collapse_rate": sum(r["collapsed"] for r in own) / len(own),
            "divergence_rate": sum(r["diverged"] is not None for r in own) / len(own),
            "staleness_reached": max(behind, default=0.0),
        }
    differences = {f"{a} − {b}": paired_difference(grids[a], grids[b]) for a, b in pairs}
    return {"variants": per_variant, "differences": differences}


def pad_curve(rows: list[list[float]], iterations: int) -> tuple[list[list[float]], int | None]:
    """Per-iteration task scores padded to `iterations + 1` rows by carrying the last one forward (a run
    that stopped early keeps its last policy); returns the rows and where padding began (None: none)."""
    if not rows:
        raise ValueError("a run without even its base evaluation cannot be scored")
    if len(rows) > iterations:
        return rows[: iterations + 1], None
    return rows + [rows[-1]] * (iterations + 1 - len(rows)), len(rows)


def plot(
    curves: dict[str, list[dict[str, Any]]],
    differences: dict[str, dict[str, Any]],
    title: str,
    out: Path,
) -> None:
    """Left: each variant's held-out pass@1 per iteration with its 95% band. Right: paired differences
    per iteration with their bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax in (left, right):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for name, rows in curves.items():
        x = [r["iteration"] for r in rows]
        left.plot(x, [r["pass_at_1"] for r in rows], marker="o", label=name)
        left.fill_between(x, [r["ci"][0] for r in rows], [r["ci"][1] for r in rows], alpha=0.15)
    left.set(xlabel="iteration", ylabel="held-out pass@1", ylim=(0, 1), title=title)
    left.legend(fontsize=8)
    for label, diff in differences.items():
        rows = diff["per_iteration"]
        x = [r["iteration"] for r in rows]
        right.plot(x, [r["difference"] for r in rows], marker=".", label=label)
        right.fill_between(x, [r["ci"][0] for r in rows], [r["ci"][1] for r in rows], alpha=0.15)
    right.axhline(0.0, color="black", linewidth=0.8)
    right.set(xlabel="iteration", ylabel="paired difference", title="paired by (loop seed, task), 95% CI")
    if differences:  # one variant: nothing to pair
        right.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
