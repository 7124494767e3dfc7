"""The closed-loop benchmark's task family, seed scaffold and loss variants (shared by its CLI and tests).

Tasks are three-term sums of two-digit numbers; the wording is a setting (`WORDINGS`) because it, more
than the arithmetic, sets the embedded model's base rate: the scaffold's two worked examples use the
form "What is 3 + 4?", and the model must carry the pattern over to the task's wording.

Variants form a factorial: each differs from the one before it in one loss setting, and every loss
setting is written out in full (not inherited from a registry name), so the table of settings the
benchmark prints is the whole difference between them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Collection
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

WORDINGS = {
    "plus": "What is {a} + {b} + {c}?",
    "sum-of": "What is the sum of {a}, {b} and {c}?",
    "total": "Add up {a}, {b} and {c}. What is the total?",
}

# GRPO's settings; every variant below changes one of them (or adds one) relative to its predecessor.
_GRPO = {
    "clip_low": 0.2,
    "clip_high": 0.2,
    "aggregation": "seq-mean-token-mean",
    "clip_ratio_c": None,
    "state_correction": "none",
    "clip_schedule": "none",
    "clip_exponent": 0.0,
}
_DAPO = {**_GRPO, "clip_high": 0.28, "aggregation": "token-mean"}
_DAPO_DUAL = {**_DAPO, "clip_ratio_c": 3.0}
_TAPO = {**_DAPO_DUAL, "state_correction": "geo"}
# The position clip of tapo_stability.py: the log window shrinks like 1/sqrt(position). The registry's
# `tapo` keeps p = 0 (no position clip), so `tapo` here is "TAPO without the position clip".
_TAPO_POSITION = {**_TAPO, "clip_schedule": "position", "clip_exponent": -0.5}

# name -> loss settings (all of `tapo_backend.losses.LossConfig` that any variant changes), trained
# through the registry's `tapo` entry (a token ratio with state correction; σ = none is a plain token
# ratio, so `grpo`, `dapo` equal the registry's entries of those names).
VARIANTS: dict[str, dict[str, Any]] = {
    "grpo": _GRPO,
    "dapo": _DAPO,
    "dapo+dual": _DAPO_DUAL,
    "tapo": _TAPO,
    "tapo+pos": _TAPO_POSITION,
}
VARIANT_CHANGES = {
    "grpo": "GRPO: ε 0.2/0.2, per-sequence mean",
    "dapo": "grpo + clip-higher (ε_hi 0.28) + token mean",
    "dapo+dual": "dapo + dual clip (c = 3)",
    "tapo": "dapo+dual + geometric state correction (registry 'tapo', position clip off)",
    "tapo+pos": "tapo + position clip (p = -0.5)",
}
# Outside the chain: a setting measured without the ones the chain adds before it (`--variants
# grpo,grpo+geo` pairs them).
EXTRA_VARIANTS: dict[str, dict[str, Any]] = {"grpo+geo": {**_GRPO, "state_correction": "geo"}}
EXTRA_CHANGES = {
    "grpo+geo": "grpo + geometric state correction (the state correction without the DAPO settings)"
}
ALL_VARIANTS = {**VARIANTS, **EXTRA_VARIANTS}
ALL_CHANGES = {**VARIANT_CHANGES, **EXTRA_CHANGES}
TRAIN_ALGO = "tapo"


def parse_variants(text: str) -> list[str]:
    """Comma-separated variant names, checked; a clear error names the valid ones."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ALL_VARIANTS]
    if unknown or not names:
        raise SystemExit(
            f"--variants: unknown {', '.join(unknown) or '(none)'}; choose from {', '.join(ALL_VARIANTS)}"
        )
    return names


Terms = tuple[int, int, int]


def write_tasks(
    path: Path, count: int, seed: int, wording: str, exclude: Collection[Terms] = ()
) -> set[Terms]:
    """Write `count` three-term sums (numbers 10-99) in `wording`, none of them in `exclude`; returns
    their terms (to keep another set disjoint from them)."""
    if wording not in WORDINGS:
        raise SystemExit(f"--wording: unknown {wording!r}; choose from {', '.join(WORDINGS)}")
    rng = random.Random(seed)
    terms: set[Terms] = set()
    while len(terms) < count:
        triple = (rng.randint(10, 99), rng.randint(10, 99), rng.randint(10, 99))
        if triple not in exclude:
            terms.add(triple)
    with path.open("w", encoding="utf-8") as f:
        for a, b, c in sorted(terms):
            problem = WORDINGS[wording].format(a=a, b=b, c=c)
            f.write(
                json.dumps({"id": f"add3-{a}-{b}-{c}", "problem": problem, "answer": str(a + b + c)}) + "\n"
            )
    return terms


def scaffold() -> Any:
    """The seed scaffold with two worked examples in the "a + b" form, 2 steps, text actions."""
    from recreate.scaffold import load_scaffold
    from recreate.scaffold.model import Example, ExampleStep

    seed = load_scaffold(REPO / "scaffolds" / "minimal")
    commands = {f"What is {a} + {b}?": f"echo {MARKER}; echo $(({a} + {b}))" for a, b in ((3, 4), (25, 17))}
    examples = [Example(task=task, steps=[ExampleStep(command=c)]) for task, c in commands.items()]
    limits = seed.limits.model_copy(update={"max_steps": 2})
    return seed.model_copy(update={"examples": examples, "limits": limits, "action_format": "text"})
