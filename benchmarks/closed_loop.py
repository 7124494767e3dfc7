"""Learning with a real model: online TAPO and GRPO side by side on the embedded SmolLM2-135M.

The task, through the real agent runtime (text actions in a bwrap sandbox, up to 2 steps; the math
domain checks the submitted number): "What is the sum of 31 and 45?". The scaffold shows two worked
examples as earlier turns of the conversation, in the other wording ("What is 3 + 4?" answered by
`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo $((3 + 4))`, mini-swe-agent's submit-by-output
convention). The model must carry the pattern over to the new wording: the room RL has to learn in.

Calibration, measured 2026-12-03 on a loaded 2-core machine (30 problems, T=0.7, no truncation, a
harness sending the agent's messages): with these two examples as turns, "What is a + b?" is solved
87% of the time and mixed +, -, * 90%; "the sum of a and b" 40% — chosen, since group-relative RL needs
tasks the base model solves sometimes. The same examples inside the instance prompt as text give 3%,
one example 0%, and examples that submit with a second ```submit turn 7%: earlier versions of this
benchmark (examples in the prompt) measured a base rate of 0/24 and could show no learning.

Both algorithms start from the same base model with the same tasks, seeds, sampling, LoRA settings,
learning rate, steps and held-out set; only `algo` differs (the loss registry's defaults for each).
Each gets the same share of the time budget. Held-out pass@1 is measured before training (row 0) and
after every iteration, with a bootstrap interval over held-out tasks; the paired difference of the
final scores (same held-out tasks and seeds) is reported with its interval too.

Measured 2026-12-04 (2 cores, `--minutes 90`, defaults otherwise, lr 1e-4): both algorithms 0.271
[0.125, 0.417] -> 1.000 over 24 held-out tasks (paired +0.729 [+0.583, +0.875]) in 8 iterations of
~16 min per algorithm; after iteration 1 TAPO 0.854, GRPO 0.625; both 1.000 from iteration 3, so the
final scores cannot separate them. TAPO at lr 2e-5 (the earlier default; `--algos tapo --lr 2e-5
--minutes 45`): 0.417 / 0.479 / 0.542 after iterations 1-3, 0.917 after 8 (20.5 min).

    .venv/bin/python benchmarks/closed_loop.py [--minutes 45] [--iterations 8] [--algos tapo,grpo]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from recreate.domains import get_domain  # noqa: E402
from recreate.finetune.online import OnlineConfig, online_train  # noqa: E402
from recreate.finetune.policy import LORA_LR  # noqa: E402
from recreate.scaffold import Scaffold, load_scaffold  # noqa: E402
from recreate.scaffold.model import Example, ExampleStep  # noqa: E402

MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def write_tasks(path: Path, count: int, seed: int) -> Path:
    rng = random.Random(seed)
    pairs: set[tuple[int, int]] = set()
    while len(pairs) < count:
        pairs.add((rng.randint(10, 99), rng.randint(10, 99)))
    with path.open("w", encoding="utf-8") as f:
        for a, b in sorted(pairs):
            row = {"id": f"sum-{a}-{b}", "problem": f"What is the sum of {a} and {b}?", "answer": str(a + b)}
            f.write(json.dumps(row) + "\n")
    return path


def scaffold() -> Scaffold:
    """The seed scaffold with two worked examples (in the other wording) and 2 steps, text actions."""
    seed = load_scaffold(REPO / "scaffolds" / "minimal")
    commands = {f"What is {a} + {b}?": f"echo {MARKER}; echo $(({a} + {b}))" for a, b in ((3, 4), (25, 17))}
    examples = [Example(task=task, steps=[ExampleStep(command=c)]) for task, c in commands.items()]
    limits = seed.limits.model_copy(update={"max_steps": 2})
    return seed.model_copy(update={"examples": examples, "limits": limits, "action_format": "text"})


def plot(curves: dict[str, list[dict]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for algo, rows in curves.items():
        x = [r["iteration"] for r in rows]
        y = [r["val_pass_at_1"] for r in rows]
        low = [r["val_ci"][0] for r in rows]
        high = [r["val_ci"][1] for r in rows]
        ax.plot(x, y, marker="o", label=algo)
        ax.fill_between(x, low, high, alpha=0.2)
    ax.set_xlabel("iteration")
    ax.set_ylabel("held-out pass@1")
    ax.set_ylim(0, 1)
    ax.legend()
    ax.set_title("online RL on SmolLM2-135M (agent runtime, 'the sum of a and b')")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def _per_task(folder: Path) -> dict[str, float]:
    """Held-out pass@1 per task of one evaluation (its runs over the eval seeds)."""
    from recreate.experience.schema import load_trajectory

    scores: dict[str, list[float]] = {}
    for file in folder.glob("*.json"):
        traj = load_trajectory(json.loads(file.read_text(encoding="utf-8")))
        scores.setdefault(traj.task_id, []).append(float(bool(traj.evaluation and traj.evaluation.passed)))
    return {task: sum(v) / len(v) for task, v in scores.items()}


def paired(before: dict[str, float], after: dict[str, float], label: str) -> str:
    """Mean of after - before over the shared tasks (same tasks, same seeds), with its bootstrap CI."""
    from recreate.evaluation.metrics import bootstrap_ci

    diffs = [after[t] - before[t] for t in sorted(set(before) & set(after))]
    if not diffs:
        return f"{label}: no shared held-out tasks to pair"
    low, high = bootstrap_ci(diffs)
    mean = sum(diffs) / len(diffs)
    return f"{label}: {mean:+.3f} [{low:+.3f}, {high:+.3f}] over {len(diffs)} held-out tasks"


def gains_and_difference(out: Path, curves: dict[str, list[dict]]) -> list[str]:
    """Each algorithm's final policy against the base model, and the two final policies against each
    other, paired by held-out task."""
    finals = {}
    lines = []
    for algo, rows in curves.items():
        finals[algo] = _per_task(out / algo / "eval" / f"it-{rows[-1]['iteration']:03d}")
        base = _per_task(out / algo / "eval" / "it-000")
        lines.append(paired(base, finals[algo], f"{algo} final - base"))
    if len(finals) == 2:
        first, second = finals
        lines.append(paired(finals[second], finals[first], f"final {first} - {second}"))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=45.0, help="time budget for all algorithms together")
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--algos", default="tapo,grpo")
    parser.add_argument("--train-tasks", type=int, default=64)
    parser.add_argument("--val-tasks", type=int, default=24)
    parser.add_argument("--tasks-per-iteration", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per iteration")
    parser.add_argument("--lr", type=float, default=LORA_LR)
    parser.add_argument("--eval-seeds", type=int, default=2)
    parser.add_argument("--reply-tokens", type=int, default=64, help="cap per model reply")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--home", type=Path, default=None, help="RECREATE_HOME (keeps the HF conversion)")
    parser.add_argument("--out", type=Path, default=None, help="folder for runs, table and plot")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="closed-loop-"))
    home = args.home or REPO / ".recreate"
    out.mkdir(parents=True, exist_ok=True)
    train = get_domain("math", data=write_tasks(out / "train.jsonl", args.train_tasks, args.seed))
    val = get_domain("math", data=write_tasks(out / "val.jsonl", args.val_tasks, args.seed + 1))
    train_ids = {t.prompt for t in train.tasks("all")}
    val_tasks = [t for t in val.tasks("all") if t.prompt not in train_ids]
    algos = args.algos.split(",")
    shared = {k: v for k, v in vars(args).items() if k not in ("algos", "out", "home")}
    print("shared settings:", json.dumps(shared, default=str))
    curves: dict[str, list[dict]] = {}
    for algo in algos:
        config = OnlineConfig(
            iterations=args.iterations, tasks_per_iteration=args.tasks_per_iteration,
            group_size=args.group_size, algo=algo, lr=args.lr, steps_per_iteration=args.steps,
            eval_seeds=args.eval_seeds, seed=args.seed, max_reply_tokens=args.reply_tokens,
        )  # fmt: skip
        deadline = time.time() + args.minutes * 60 / len(algos)
        started = time.time()
        rows = online_train(
            scaffold=scaffold(), domain=train, train_tasks=train.tasks("all"), val_tasks=val_tasks,
            run_dir=out / algo, home=home, config=config, deadline=deadline,
        )  # fmt: skip
        curves[algo] = [json.loads(json.dumps(r.__dict__)) for r in rows]
        print(f"{algo}: {len(rows) - 1} iterations in {(time.time() - started) / 60:.1f} min")
    header = ("algo", "it", "pass@1", "95% CI", "reward", "|Δlogp|", "tokens", "s")
    print("\n{:6} {:>3} {:>7} {:>15} {:>7} {:>8} {:>7} {:>5}".format(*header))
    for algo, rows in curves.items():
        for r in rows:
            ci = f"[{r['val_ci'][0]:.3f}, {r['val_ci'][1]:.3f}]"
            reward = "—" if r["reward_mean"] is None else f"{r['reward_mean']:.3f}"
            gap = "—" if r["logprob_mismatch"] is None else f"{r['logprob_mismatch']:.4f}"
            print(
                f"{algo:6} {r['iteration']:>3} {r['val_pass_at_1']:>7.3f} {ci:>15} {reward:>7} {gap:>8} "
                f"{r['generated_tokens']:>7} {r['wall_s']:>5.0f}"
            )
    for algo, rows in curves.items():
        gain = rows[-1]["val_pass_at_1"] - rows[0]["val_pass_at_1"]
        first, last = rows[0]["val_pass_at_1"], rows[-1]["val_pass_at_1"]
        print(f"{algo}: held-out pass@1 {first:.3f} -> {last:.3f} ({gain:+.3f})")
    for line in gains_and_difference(out, curves):
        print(line)
    plot(curves, out / "closed_loop.png")
    (out / "curves.json").write_text(json.dumps(curves, indent=1), encoding="utf-8")
    print(f"plot: {out / 'closed_loop.png'}  runs: {out}")


if __name__ == "__main__":
    main()
