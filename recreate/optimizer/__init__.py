"""The ReCreate optimizer: agent-as-optimizer with hierarchical updates and gated versions.

Exports load lazily so that `recreate --help` does not import LangGraph and Chroma.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Ablations": "recreate.optimizer.reflect",
    "EvolveConfig": "recreate.optimizer.state",
    "EvolveError": "recreate.optimizer.state",
    "EvolveLoop": "recreate.optimizer.loop",
    "EvolveResult": "recreate.runs",
    "Proposal": "recreate.optimizer.proposals",
    "ReCreateOptimizer": "recreate.optimizer.optimizer",
    "SizeBudget": "recreate.optimizer.synthesis",
    "optimize": "recreate.optimizer.run",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'recreate.optimizer' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
