"""Scores of an evaluation run: pass@1 and mean score with bootstrap confidence intervals, cost per task."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from recreate.evaluation.errors import ERROR_KEY, is_rollout_error
from recreate.evaluation.stats import bootstrap_ci
from recreate.experience.schema import Trajectory


@dataclass
class Summary:
    tasks: int
    rollouts: int
    pass_at_1: float
    pass_at_1_ci: tuple[float, float]
    mean_score: float
    mean_score_ci: tuple[float, float]
    total_cost_usd: float
    cost_per_task_usd: float | None  # None when no call had a known price
    unpriced_rollouts: int
    mean_steps: float
    exit_statuses: dict[str, int] = field(default_factory=dict)
    endpoint_errors: int = 0  # rollouts whose model call failed: counted here, never scored
    machine_errors: int = 0  # rollouts whose sandbox or evaluator failed (not the submission): never scored

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(trajectories: list[Trajectory], *, seed: int = 0) -> Summary:
    """Per task, the mean over its rollouts (seeds); then the mean over tasks with a bootstrap CI.
    A rollout without an evaluation counts as score 0, not passed; one whose model call, sandbox or
    evaluator failed is not the scaffold's score and is left out (counted in `endpoint_errors` and
    `machine_errors`)."""
    errored = Counter(t.metadata[ERROR_KEY] for t in trajectories if is_rollout_error(t))
    trajectories = [t for t in trajectories if not is_rollout_error(t)]
    passes: dict[str, list[float]] = defaultdict(list)
    scores: dict[str, list[float]] = defaultdict(list)
    for traj in trajectories:
        ev = traj.evaluation
        passes[traj.task_id].append(1.0 if ev and ev.passed else 0.0)
        scores[traj.task_id].append(float(ev.score) if ev else 0.0)
    task_pass = [float(np.mean(v)) for v in passes.values()]
    task_score = [float(np.mean(v)) for v in scores.values()]
    costs = [t.totals.cost_usd for t in trajectories]
    known = [c for c in costs if c is not None]
    return Summary(
        tasks=len(passes),
        rollouts=len(trajectories),
        pass_at_1=float(np.mean(task_pass)) if task_pass else 0.0,
        pass_at_1_ci=bootstrap_ci(task_pass, seed=seed),
        mean_score=float(np.mean(task_score)) if task_score else 0.0,
        mean_score_ci=bootstrap_ci(task_score, seed=seed),
        total_cost_usd=round(sum(known), 6),
        cost_per_task_usd=round(sum(known) / len(passes), 6) if known and passes else None,
        unpriced_rollouts=len(costs) - len(known),
        mean_steps=float(np.mean([t.totals.steps for t in trajectories])) if trajectories else 0.0,
        exit_statuses=dict(Counter(t.outcome.exit_status for t in trajectories)),
        endpoint_errors=errored["endpoint"],
        machine_errors=errored["machine"] + errored["evaluator"],
    )
