"""The statistics of every decision and report: bootstrap intervals and the gate (scaffold and model).

The gate: a candidate version is accepted only if it beats its parent on held-out tasks, by a test. Both
versions are scored on the same validation tasks with the same seeds (`--val-seeds` runs per task), so every
(task, seed) is a pair. Per task, the improvement is the mean over its seeds of candidate − parent. A
percentile bootstrap of the mean over tasks (tasks resampled with replacement — seeds of one task stay
together, being correlated — 2000 resamples, a fixed seed) gives an interval of the mean improvement (95% at
the default level). The candidate is accepted when the interval's lower bound is above `min_improvement`
(default 0: the improvement must be reliably positive) and an exact paired sign-flip test of the same
per-task improvements (less `min_improvement`) rejects "no improvement" at the one-sided level `alpha`
(default `ALPHA` = 2.5%, the level of a 95% interval's lower bound; the interval is the two-sided 1 −
2·alpha one). The bootstrap alone is no test on few tasks: when every task improves, every resample does, so
two tasks that improved by chance (1 in 4 under no effect) were an interval above 0. The test's null is that
the versions are exchangeable (either could have made each task's runs), so each task's difference is as
likely to have either sign: k tasks all improving has chance 2^-k, and no candidate is accepted on fewer
than `min_tasks_to_accept(alpha)` tasks (6 at 2.5%: 2^-5 > 2.5%). A skewed effect of mean zero (small gains
on most tasks, a large loss on a few) is not that null; the bootstrap bound is what weighs it. A tie — a
mean improvement of zero, per-task differences within `TIE` of 0 being float noise — goes to the smaller
scaffold: the candidate is accepted only if it is smaller than its parent. Pairs where either version hit an
endpoint error are not scores and are left out (see `recreate.evaluation.errors`).
Fewer than `MIN_TASKS` paired tasks (e.g. every other task errored) is no test: the bootstrap of one value
is that value, an interval of width zero, so such a candidate is rejected whatever its one score says; so is
one for which fewer than `MIN_SCORED` of the validation runs asked for were scored for both versions (the
errors' tasks are not a random sample: the few left decide nothing).

The bootstrap is `scipy.stats.bootstrap` (percentile method). It resamples observations, not ragged
groups, so the task grouping and the pairing are done first: the unit it resamples is one task's mean
paired difference. Used by the optimizer's scaffold gate, the fine-tuning step's model gate, the final
test and the evaluation summaries alike.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass

import numpy as np

CONFIDENCE = 0.95  # of the intervals reported
RESAMPLES = 2000
MIN_TASKS = 2  # paired tasks below which there is no interval to test (one task: no variation to resample)
MIN_SCORED = 0.5  # of the validation runs asked for, the share that must be scored for both versions
ALPHA = 0.025  # the gate's one-sided level: that of a two-sided 95% interval's lower bound
LEAST_ALPHA = 0.001  # the smallest level taken: the random flips resolve p-values 20 times finer
FLIPS = 20_000  # random sign flips above EXACT_UP_TO tasks, drawn FLIPS_AT_ONCE at a time (memory)
FLIPS_AT_ONCE = 2_000
TIE = 1e-9  # per-task differences this small are float noise: a tie
EXACT_UP_TO = 16  # tasks up to which the sign-flip test enumerates every flip; above, FLIPS random ones


@dataclass
class GateResult:
    accepted: bool
    reason: str
    parent_mean: float
    candidate_mean: float
    improvement: float  # mean over tasks of the per-task mean difference (candidate − parent)
    low: float  # the bootstrap interval of `improvement`
    high: float
    n: int  # paired (task, seed) scores
    tasks: int
    wins: int
    losses: int
    ties: int
    min_improvement: float = 0.0
    p_value: float = 1.0  # the one-sided sign-flip test of "no improvement beyond min_improvement"
    alpha: float = ALPHA  # its level; the interval [low, high] is the two-sided 1 - 2·alpha one

    def to_dict(self) -> dict:
        return asdict(self)


def task_of(key: str) -> str:
    """Score keys are task ids, or "task#seed" with several validation seeds."""
    return key.rsplit("#", 1)[0]


def paired_gate(
    parent: dict[str, float],
    candidate: dict[str, float],
    *,
    min_improvement: float = 0.0,
    parent_size: int | None = None,
    candidate_size: int | None = None,
    seed: int = 0,
    asked: int | None = None,
    alpha: float = ALPHA,
) -> GateResult:
    """`asked`: the validation runs (task, seed) each version was run on; when errors (which are no
    scores) leave fewer than MIN_SCORED of them paired, the few left decide nothing. `alpha`: the
    one-sided level of the test (see the module's docstring). Scores must be finite numbers."""
    keys = sorted(set(parent) & set(candidate))
    for name, scores in (("parent", parent), ("candidate", candidate)):
        if bad := next((k for k in keys if not math.isfinite(scores[k])), None):
            raise ValueError(
                f"the {name}'s score of {bad!r} is {scores[bad]!r}; a gate compares finite scores"
            )
    if not keys:
        reason = "rejected: no validation task was scored for both versions (n=0)"
        return GateResult(False, reason, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0, 0, 0, min_improvement, 1.0, alpha)
    per_task = _per_task({key: candidate[key] - parent[key] for key in keys})
    per_task[np.abs(per_task) <= TIE] = 0.0  # 0.1 + 0.2 against 0.3 is a tie, not a loss
    improvement = float(per_task.mean())
    low, high = bootstrap_ci(per_task, confidence=1 - 2 * alpha, seed=seed)
    p_value = sign_flip_p(per_task - min_improvement, seed=seed)
    diffs = [candidate[k] - parent[k] for k in keys]
    wins, losses = sum(d > TIE for d in diffs), sum(d < -TIE for d in diffs)
    smaller = candidate_size is not None and parent_size is not None and candidate_size < parent_size
    if len(per_task) < MIN_TASKS:
        accepted, why = False, f"too few tasks to test (fewer than {MIN_TASKS} scored for both versions)"
    elif asked and len(keys) < MIN_SCORED * asked:
        accepted, why = False, f"only {len(keys)} of {asked} validation runs were scored for both versions"
    elif low > min_improvement and p_value <= alpha:
        accepted, why = True, f"the lower bound is above {min_improvement:g}, sign-flip p={p_value:.3f}"
    elif improvement == 0.0 and smaller:  # a looser margin (below 0) never turns a tie away
        accepted, why = True, "a tie, and the candidate is the smaller scaffold"
    elif improvement == 0.0:
        sizes = parent_size is not None and candidate_size is not None
        accepted, why = False, "a tie, and the parent is not larger" if sizes else "a tie keeps the parent"
    elif low > min_improvement:
        least = min_tasks_to_accept(alpha)
        few = f" (fewer than {least} tasks never do)" if len(per_task) < least else ""
        accepted, why = False, f"the sign-flip test gives p={p_value:.3f}, not ≤ {alpha:g}{few}"
    else:
        accepted, why = False, f"the lower bound is not above {min_improvement:g}"
    p_mean = sum(parent[k] for k in keys) / len(keys)
    c_mean = sum(candidate[k] for k in keys) / len(keys)
    reason = (
        f"{'accepted' if accepted else 'rejected'}: improvement {improvement:+.3f}, "
        f"{interval_label(alpha)} [{low:+.3f}, {high:+.3f}], n={len(keys)} ({len(per_task)} tasks); "
        f"val mean {c_mean:.3f} vs parent {p_mean:.3f}; {wins} better, {losses} worse: {why}"
    )
    return GateResult(
        accepted,
        reason,
        p_mean,
        c_mean,
        improvement,
        low,
        high,
        len(keys),
        len(per_task),
        wins,
        losses,
        len(keys) - wins - losses,
        min_improvement,
        p_value,
        alpha,
    )


def _per_task(scores: dict[str, float]) -> np.ndarray:
    """Each task's mean over its seeds, in task order (a task's seeds are correlated: one unit)."""
    by_task: dict[str, list[float]] = defaultdict(list)
    for key, value in scores.items():
        by_task[task_of(key)].append(value)
    return np.array([np.mean(v) for _, v in sorted(by_task.items())])


def interval_label(alpha: float = ALPHA) -> str:
    """'95% CI' at the default level; '99.8% CI' at 0.001."""
    return f"{100 * (1 - 2 * alpha):.3g}% CI"


def min_tasks_to_accept(alpha: float = ALPHA) -> int:
    """The fewest paired tasks on which the sign-flip test can reach `alpha` (all k improve: 2^-k)."""
    return max(MIN_TASKS, math.ceil(math.log2(1 / alpha) - 1e-9))


def gate_cannot_improve(tasks: int, alpha: float = ALPHA) -> str | None:
    """Why a gate on `tasks` validation tasks at level `alpha` can accept no improvement, or None."""
    least = min_tasks_to_accept(alpha)
    if tasks >= least:
        return None
    looser = f", or a looser level (--gate-alpha {2.0**-tasks:g})" if tasks >= MIN_TASKS else ""
    return (
        f"with {tasks} validation task(s) the gate (a paired test at level {alpha:g}) can accept no "
        f"improvement: it needs {least}; give more held-out tasks{looser}"
    )


def sign_flip_p(differences: np.ndarray, *, seed: int = 0) -> float:
    """One-sided p-value of "the differences are centred on 0" against "above": the share of sign flips
    of the differences whose sum is at least the observed one. Exact (every flip) up to EXACT_UP_TO values;
    above, FLIPS random flips with the observed one counted (a valid p-value, never 0)."""
    magnitudes = np.abs(np.asarray(differences, dtype=float))
    observed = float(np.sum(differences)) - 1e-9 * max(1.0, float(magnitudes.sum()))  # float sums' noise
    n = magnitudes.size
    if n == 0:
        return 1.0
    if n <= EXACT_UP_TO:
        codes = np.arange(2**n)[:, None] >> np.arange(n) & 1
        sums = ((2 * codes - 1) * magnitudes).sum(axis=1)
        return float(np.mean(sums >= observed))
    rng, at_least = np.random.default_rng(seed), 0
    for _ in range(FLIPS // FLIPS_AT_ONCE):
        signs = rng.choice([-1.0, 1.0], size=(FLIPS_AT_ONCE, n))
        at_least += int(np.sum(signs @ magnitudes >= observed))
    return (1 + at_least) / (1 + FLIPS)


def bootstrap_ci(
    values: list[float] | np.ndarray, *, confidence: float = CONFIDENCE, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (`RESAMPLES` resamples of the values); (nan, nan) for no
    values, (x, x) for one (nothing to resample)."""
    data = np.asarray(values, dtype=float)
    if data.size < 2:
        return (float(data[0]), float(data[0])) if data.size else (float("nan"), float("nan"))
    from scipy.stats import bootstrap  # 0.6 s to import: not on the command line's way to --help

    rng = np.random.default_rng(seed)
    result = bootstrap(
        (data,), np.mean, n_resamples=RESAMPLES, confidence_level=confidence, method="percentile", rng=rng
    )
    interval = result.confidence_interval
    return float(interval.low), float(interval.high)


def mean_interval(scores: dict[str, float], *, seed: int = 0) -> tuple[float, float, float]:
    """The mean of `scores` (keys as in `paired_gate`) with its 95% interval, bootstrapped as the gate's."""
    if not scores:
        return 0.0, 0.0, 0.0
    return (float(np.mean(list(scores.values()))), *bootstrap_ci(_per_task(scores), seed=seed))
