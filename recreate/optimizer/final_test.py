"""The final, untouched test: at the end of a run, the seed pair (seed scaffold, base model) and the final
pair (final scaffold, final model) run on the test split with the same seeds. Nothing in the run ever saw
these tasks (the meta-agent, the gate and the trainer see training and validation tasks only), so this is
the run's unbiased estimate of what it gained: both pass@1 with 95% intervals and their paired difference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recreate import progress
from recreate.evaluation.stats import mean_interval, paired_gate

if TYPE_CHECKING:
    from recreate.optimizer.loop import EvolveLoop
    from recreate.optimizer.state import EvolveState


def _side(scaffold: str, model: str | None, scores: dict[str, float], errors: list[str], seed: int) -> dict:
    mean, low, high = mean_interval(scores, seed=seed)
    return {
        "scaffold": scaffold, "model": model, "mean": round(mean, 4), "low": round(low, 4),
        "high": round(high, 4), "n": len(scores), "errors": errors,
    }  # fmt: skip


def final_test(loop: EvolveLoop, state: EvolveState) -> dict[str, Any]:
    seed_ref, final_ref = loop.seed_ref, state["current"]
    tasks, runs = loop.testset, loop.config.test_seeds
    policy = loop.finetune.policy if loop.finetune is not None else None
    base_model = policy.versions[0].name if policy is not None else None
    final_model = policy.current.name if policy is not None else None
    progress.testing(len(tasks), runs)
    final_scores, final_errors = loop.evaluate(loop.scaffolds.load(final_ref), "test", tasks=tasks, runs=runs)
    if seed_ref == final_ref and base_model == final_model:
        seed_scores, seed_errors = final_scores, final_errors
    elif policy is not None and final_model != base_model:
        policy.serve(policy.versions[0])  # the base model, for the seed pair; the final one again after
        try:
            seed_scores, seed_errors = loop.evaluate(
                loop.scaffolds.load(seed_ref), "test", tasks=tasks, runs=runs
            )
        finally:
            policy.serve()
    else:
        seed_scores, seed_errors = loop.evaluate(
            loop.scaffolds.load(seed_ref), "test", tasks=tasks, runs=runs
        )
    diff = paired_gate(seed_scores, final_scores, seed=loop.seed_of("test"))
    result = {
        "tasks": len(tasks),
        "seeds": runs,
        "seed": _side(seed_ref, base_model, seed_scores, seed_errors, loop.seed_of("test", "seed")),
        "final": _side(final_ref, final_model, final_scores, final_errors, loop.seed_of("test", "final")),
        "difference": {
            "mean": round(diff.improvement, 4), "low": round(diff.low, 4), "high": round(diff.high, 4),
            "n": diff.n, "better": diff.wins, "worse": diff.losses,
        },
    }  # fmt: skip
    progress.tested(result)
    return result
