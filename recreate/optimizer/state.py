"""The evolve loop's settings (`EvolveConfig`), its checkpointed state (`EvolveState`) and the seeds that
pair every version's runs: plain data that the loop and the nodes it calls (plan, gate, final test) share.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
from dataclasses import dataclass, field
from typing import Annotated, Any

from typing_extensions import TypedDict  # pydantic (LangGraph server schemas) needs it on 3.11

from recreate.errors import Arg, ArgumentError
from recreate.evaluation.stats import ALPHA, LEAST_ALPHA
from recreate.optimizer.protocol import PROTOCOLS
from recreate.optimizer.reflect import Ablations
from recreate.optimizer.synthesis import SizeBudget


class EvolveError(ArgumentError):
    """A run that cannot start as asked (bad sets or settings, another config); the message names the fix."""


# EvolveConfig's counts: field -> (least value, its command-line option where that is not --field-name)
_COUNTS = {
    "rounds": (1, None),
    "batch_size": (1, None),
    "max_concurrency": (1, "--concurrency"),
    "val_seeds": (1, None),
    "test_seeds": (0, None),
    "reflect_steps": (1, None),
    "max_rollouts": (1, None),
}


@dataclass
class EvolveConfig:
    rounds: int = 3
    batch_size: int = 4
    max_concurrency: int = 4
    min_improvement: float = 0.0  # the gate accepts when the improvement's lower bound is above this
    gate_alpha: float = ALPHA  # the gate's one-sided level (recreate.evaluation.stats)
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

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """EvolveError naming the first field whose value the loop cannot run with (also after a field
        was set on an existing config)."""
        for name, (least, flag) in _COUNTS.items():
            value = getattr(self, name)
            if name == "max_rollouts" and value is None:
                continue
            if not _is_int(value) or value < least:
                _refuse(name, value, f"a whole number of at least {least}", flag)
        if not _is_int(self.seed):
            _refuse("seed", self.seed, "a whole number", "--random-seed")
        if not _is_number(self.min_improvement) or not math.isfinite(self.min_improvement):
            _refuse("min_improvement", self.min_improvement, "a finite number (e.g. 0.0)")
        if not _is_number(self.gate_alpha) or not LEAST_ALPHA <= self.gate_alpha < 0.5:
            _refuse("gate_alpha", self.gate_alpha, f"a level from {LEAST_ALPHA} to below 0.5 (e.g. {ALPHA})")
        if self.max_wall_s is not None and not (
            _is_number(self.max_wall_s) and 0 < self.max_wall_s < math.inf
        ):
            _refuse("max_wall_s", self.max_wall_s, "a finite number of seconds above 0 (or no limit)")
        if self.optimizer_protocol not in PROTOCOLS:
            _refuse("optimizer_protocol", self.optimizer_protocol, f"one of {', '.join(PROTOCOLS)}")
        if not isinstance(self.bootstrap, bool):
            _refuse("bootstrap", self.bootstrap, "True or False")
        if not isinstance(self.ablations, Ablations):
            _refuse("ablations", self.ablations, "an Ablations")
        budget = self.size_budget
        if not (
            isinstance(budget, SizeBudget)
            and _is_int(budget.max_chars)
            and budget.max_chars > 0
            and _is_number(budget.min_fraction)
            and 0 <= budget.min_fraction <= 1
        ):
            _refuse("size_budget", budget, "a SizeBudget(max_chars above 0, min_fraction from 0 to 1)")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _refuse(name: str, value: Any, must_be: str, flag: str | None = None) -> None:
    """'rounds is -1; pass a whole number of at least 1' (on the command line: '--rounds is -1; ...')."""
    raise EvolveError(f"{{name}} is {value!r}; pass {must_be}", name=Arg(name, flag=flag))


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
