"""The ReCreate optimizer: agent-as-optimizer with hierarchical updates and gated versions."""

from recreate.optimizer.gate import GateResult, paired_gate
from recreate.optimizer.loop import EvolveConfig, EvolveLoop
from recreate.optimizer.optimizer import EvolveError, EvolveResult, ReCreateOptimizer
from recreate.optimizer.proposals import Proposal
from recreate.optimizer.reflect import Ablations
from recreate.optimizer.synthesis import SizeBudget

__all__ = [
    "Ablations",
    "EvolveConfig",
    "EvolveError",
    "EvolveLoop",
    "EvolveResult",
    "GateResult",
    "Proposal",
    "ReCreateOptimizer",
    "SizeBudget",
    "paired_gate",
]
