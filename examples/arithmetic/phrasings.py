"""Write phrased_sums.jsonl: three-term sums of two-digit numbers, each worded one of four ways.

The main job's tasks, worded so that the seed scaffold's worked examples (two terms, symbols) cover little
of them and both halves of the loop have room: measured on the validation split (15 tasks x 2 seeds, the
f32 policy the main job serves), the embedded 135M model passes 0.13 with the seed scaffold, 0.70 with a
symbolic three-term worked example added, 0.93 with a "sum of" one (the wording chosen among three
families tried: symbols-only sums, 0.57 -> 0.89 with one example, saturate; word problems, 0.00 -> 0.18,
give the optimizer almost no passing run to learn from). Run: python examples/arithmetic/phrasings.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDINGS = (
    "What is {a} + {b} + {c}?",
    "What is the sum of {a}, {b} and {c}?",
    "Add {a}, {b} and {c}. What do you get?",
    "What is {a} plus {b} plus {c}?",
)


def phrased_sums(n: int = 64, seed: int = 11) -> list[dict[str, str]]:
    rng, rows, seen = random.Random(seed), [], set()
    while len(rows) < n:
        k = rng.randrange(len(WORDINGS))
        a, b, c = (rng.randint(10, 99) for _ in range(3))
        task_id = f"sum3-p{k}-{a}-{b}-{c}"
        if task_id not in seen:
            seen.add(task_id)
            problem = WORDINGS[k].format(a=a, b=b, c=c)
            rows.append({"id": task_id, "problem": problem, "answer": str(a + b + c)})
    return rows


if __name__ == "__main__":
    out = Path(__file__).with_name("phrased_sums.jsonl")
    out.write_text("".join(json.dumps(row) + "\n" for row in phrased_sums()), encoding="utf-8")
    print(f"wrote {out}")
