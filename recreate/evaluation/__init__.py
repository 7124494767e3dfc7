"""Rollouts and evaluation: run a scaffold's agent on domain tasks, judge, cache, report."""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "RolloutCache": "recreate.evaluation.cache",
    "Rollouts": "recreate.evaluation.rollout",
    "run_task": "recreate.evaluation.rollout",
    "run_tasks": "recreate.evaluation.rollout",
    "GateResult": "recreate.evaluation.stats",
    "Summary": "recreate.evaluation.metrics",
    "paired_gate": "recreate.evaluation.stats",
    "bootstrap_ci": "recreate.evaluation.stats",
    "summarize": "recreate.evaluation.metrics",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    # imported on first use: `recreate eval --help` must not pay for LangGraph and the model clients
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'recreate.evaluation' has no attribute {name!r}")
