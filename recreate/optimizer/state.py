"""The evolve loop's settings (`EvolveConfig`), its checkpointed state (`EvolveState`) and the seeds that
pair every version's runs: plain data that the loop and the nodes it calls (plan, gate, final test) share.
"""

from __future__ import annotations

import hashlib
import json
import operator
from dataclasses import dataclass, field
from typing import Annotated, Any

from typing_extensions import TypedDict  # pydantic (LangGraph server schemas) needs it on 3.11

from recreate.optimizer.reflect import Ablations
from recreate.optimizer.synthesis import SizeBudget


@dataclass
class EvolveConfig:
    rounds: int = 3
    batch_size: int = 4
    max_concurrency: int = 4
    min_improvement: float = 0.0  # the gate accepts when the improvement's lower bound is above this
    val_seeds: int = 1  # validation runs per task and version (paired across versions)
    seed: int = 0
    ablations: Ablations = field(default_factory=Ablations)
    size_budget: SizeBudget = field(default_factory=SizeBudget)
    max_rollouts: int | None = None  # counted over the whole run, across resumes (like the $ ledger)
    max_wall_s: float | None = None  # likewise
    reflect_steps: int = 16
    # "agentic": the meta-agent inspects with tools; "structured": one constrained call per reflection
    # (models without tool calls); "auto": structured when the optimizer model is known not to call tools
    optimizer_protocol: str = "auto"
    bootstrap: bool = False  # let the optimizer model write v0 from the seed and the domain description
    test_seeds: int = 2  # runs per test task of the seed pair and the final pair at the end (0: no test)


class EvolveState(TypedDict, total=False):
    round: int
    current: str  # the accepted version, "name@vN"
    current_val: dict[str, float]  # its validation scores (per task, or per "task#seed")
    batch: list[str]
    results: Annotated[list[dict[str, Any]], operator.add]  # one per (round, task)
    patches: Annotated[list[dict[str, Any]], operator.add]  # one per round
    history: Annotated[list[dict[str, Any]], operator.add]  # one per version (v0 and each candidate)
    model: str  # the accepted policy version (runs with --finetune-every)
    test: dict[str, Any]  # the final, untouched test: seed pair vs final pair (see `final_test`)
    models: Annotated[list[dict[str, Any]], operator.add]  # one per fine-tuning step
    final: str


def task_seed(base: int, *parts: object) -> int:
    digest = hashlib.sha256(json.dumps([base, *parts], default=str).encode()).hexdigest()
    return int(digest[:8], 16)


def val_seed(base: int, gate_round: int | tuple[str, int], task_id: str, run: int) -> int:
    """The seed of validation run `run` of a task at the gate of `gate_round` (v0 is scored at gate 0's)."""
    return task_seed(base, "val", gate_round, task_id, run)
