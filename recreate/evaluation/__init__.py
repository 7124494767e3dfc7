"""Rollouts and evaluation: run a scaffold's agent on domain tasks, judge, cache, report."""

from recreate.evaluation.metrics import Summary, bootstrap_ci, summarize
from recreate.evaluation.rollout import RolloutCache, Rollouts, run_task, run_tasks

__all__ = ["RolloutCache", "Rollouts", "Summary", "bootstrap_ci", "run_task", "run_tasks", "summarize"]
